//! Quota before launch: the region's vCPU usages and limits (per VM family,
//! the regional total, spot), read from the Compute usages API and kept for
//! a short while, plus the vCPUs of this plugin's own launches since that
//! read. An offering whose VM would not fit what is left is reported
//! unavailable, so the scheduler picks a family with room instead of
//! learning of the quota from a failed create, one size at a time.

use std::collections::BTreeMap;

use crate::arm::Arm;
use crate::catalog::Sku;
use crate::settings::Settings;
use crate::vm::COMPUTE_API;
use karpenter_plugin_sdk::prelude::*;
use serde_json::{Value, json};

/// How long a read of the usages stands.
const TTL: u64 = 30;
/// A failed read is not tried again for this long; offerings are not held
/// back by quota meanwhile (a quota error on create still marks them).
const FAILED_TTL: u64 = 120;
/// Launches are counted until a read made after them includes them.
const LAUNCHED: &str = "quota/launched/";
/// Pages of the usages API read at most.
const MAX_PAGES: usize = 20;

/// The usages name of the regional total and of spot (low priority) vCPUs.
const REGIONAL: &str = "cores";
const SPOT: &str = "lowPriorityCores";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub used: u64,
    pub limit: u64,
}

/// Usages by ARM name, lower-cased ("standarddsv5family", "cores",
/// "lowprioritycores").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quotas {
    usages: BTreeMap<String, Usage>,
}

impl Quotas {
    /// Reads one page of the usages API.
    pub fn add_page(&mut self, page: &Value) {
        for u in page
            .get("value")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = u.pointer("/name/value").and_then(Value::as_str);
            let used = u.get("currentValue").and_then(Value::as_u64);
            let limit = u.get("limit").and_then(Value::as_u64);
            if let (Some(name), Some(used), Some(limit)) = (name, used, limit) {
                self.usages
                    .insert(name.to_ascii_lowercase(), Usage { used, limit });
            }
        }
    }

    fn get(&self, name: &str) -> Option<Usage> {
        self.usages.get(&name.to_ascii_lowercase()).copied()
    }

    fn take(&mut self, name: &str, vcpu: u64) {
        if let Some(u) = self.usages.get_mut(&name.to_ascii_lowercase()) {
            u.used += vcpu;
        }
    }

    /// Counts a VM of `sku` as launched: spot VMs draw on the spot quota,
    /// the others on their family's and the regional total.
    pub fn launch(&mut self, arm_family: &str, vcpu: u64, spot: bool) {
        if spot {
            self.take(SPOT, vcpu);
        } else {
            self.take(arm_family, vcpu);
            self.take(REGIONAL, vcpu);
        }
    }

    /// Why one more VM of `sku` cannot launch, if it cannot. A quota the
    /// API does not list is not held against it.
    pub fn shortfall(&self, sku: &Sku, spot: bool) -> Option<String> {
        self.check(sku, spot, false)
    }

    /// As [`Self::shortfall`] for a VM of `sku` already counted among the
    /// launches: whether the VMs counted are more than the quota holds.
    fn over(&self, sku: &Sku, spot: bool) -> Option<String> {
        self.check(sku, spot, true)
    }

    fn check(&self, sku: &Sku, spot: bool, counted: bool) -> Option<String> {
        let checks: &[(&str, &str)] = if spot {
            &[(SPOT, "spot (lowPriorityCores)")]
        } else {
            &[(&sku.arm_family, ""), (REGIONAL, "regional total (cores)")]
        };
        checks.iter().find_map(|&(name, what)| {
            let u = self.get(name)?;
            let others = if counted {
                u.used.saturating_sub(sku.vcpu)
            } else {
                u.used
            };
            (others + sku.vcpu > u.limit).then(|| {
                let what = if what.is_empty() {
                    format!("family {name}")
                } else {
                    what.to_string()
                };
                format!(
                    "{what}: {others} of {} vCPUs used; {} needs {}",
                    u.limit, sku.name, sku.vcpu
                )
            })
        })
    }

    fn render(&self) -> String {
        let v: Vec<Value> = self
            .usages
            .iter()
            .map(|(n, u)| json!({"name": {"value": n}, "currentValue": u.used, "limit": u.limit}))
            .collect();
        json!({ "value": v }).to_string()
    }

    fn parse(text: &str) -> Quotas {
        let mut q = Quotas::default();
        if let Ok(v) = serde_json::from_str::<Value>(text) {
            q.add_page(&v);
        }
        q
    }
}

fn usages_key(s: &Settings) -> String {
    format!("quota/usages/{}", s.location)
}

/// The quotas as they stand now, this plugin's launches since the last read
/// counted; `None` when the check is off or the usages cannot be read.
pub fn current(s: &Settings) -> Option<Quotas> {
    if !s.quota_check {
        return None;
    }
    let sub = s.subscription.as_deref()?;
    let key = usages_key(s);
    let mut q = match cache::get(&key) {
        Some(text) => Quotas::parse(&String::from_utf8_lossy(&text)),
        None => {
            let failed = format!("{key}/failed");
            if cache::get(&failed).is_some() {
                return None;
            }
            match fetch(s, sub) {
                Ok(q) => {
                    // The read includes every VM created before it.
                    for k in cache::keys(LAUNCHED) {
                        if cache::get(&k).is_some_and(|v| v.ends_with(CREATED.as_bytes())) {
                            cache::delete(&k);
                        }
                    }
                    cache::set(&key, q.render().as_bytes(), TTL);
                    q
                }
                Err(e) => {
                    karpenter_plugin_sdk::log::warn(
                        "quota usages unreadable; offerings are not held back by quota",
                        &[("error", &e)],
                    );
                    cache::set(&failed, e.as_bytes(), FAILED_TTL);
                    return None;
                }
            }
        }
    };
    for k in cache::keys(LAUNCHED) {
        let Some(v) = cache::get(&k) else { continue };
        let v = String::from_utf8_lossy(&v);
        let mut parts = v.split('\t');
        if let (Some(family), Some(vcpu), Some(spot)) = (parts.next(), parts.next(), parts.next())
            && let Ok(vcpu) = vcpu.parse()
        {
            q.launch(family, vcpu, spot == "spot");
        }
    }
    Some(q)
}

/// vCPUs held for a VM of this plugin's from before its create until a
/// usages read made after it includes it. Dropped without [`Self::keep`]
/// (the create failed), it lets the vCPUs go.
pub struct Reservation {
    key: Option<String>,
    value: String,
}

impl Reservation {
    /// The VM was created: ARM counts it from now on.
    pub fn keep(mut self) {
        if let Some(key) = self.key.take() {
            cache::set(
                &key,
                format!("{}\t{CREATED}", self.value).as_bytes(),
                4 * TTL,
            );
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            cache::delete(&key);
        }
    }
}

/// Whether a held entry's VM was created (rather than being created).
const CREATED: &str = "created";

/// Holds the vCPUs of one VM of `sku` for `vm_name`, or says which quota
/// has no room for it. Launches held at once by other instances of this
/// plugin count: each holds first and then looks, and gives way when what
/// it sees is over, so two never both fill the last room.
pub fn reserve(s: &Settings, vm_name: &str, sku: &Sku, spot: bool) -> Result<Reservation, String> {
    let value = format!(
        "{}\t{}\t{}",
        sku.arm_family,
        sku.vcpu,
        if spot { "spot" } else { "regular" }
    );
    if current(s).is_none() {
        return Ok(Reservation { key: None, value });
    }
    let key = format!("{LAUNCHED}{vm_name}");
    cache::set(&key, value.as_bytes(), 4 * TTL);
    let reservation = Reservation {
        key: Some(key),
        value,
    };
    match current(s).and_then(|q| q.over(sku, spot)) {
        None => Ok(reservation),
        Some(why) => Err(why),
    }
}

/// Forgets the last read: a quota error says it was stale.
pub fn invalidate(s: &Settings) {
    cache::delete(&usages_key(s));
}

fn fetch(s: &Settings, sub: &str) -> Result<Quotas, String> {
    let arm = Arm::new(s).map_err(|e| format!("{e:?}"))?;
    let first = format!(
        "/subscriptions/{sub}/providers/Microsoft.Compute/locations/{}/usages?api-version={COMPUTE_API}",
        s.location
    );
    let mut q = Quotas::default();
    arm.pages(&first, "usages", MAX_PAGES, |page| q.add_page(page))?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sku(name: &str, family: &str, vcpu: u64) -> Sku {
        Sku {
            name: name.into(),
            arm_family: family.into(),
            vcpu,
            ..crate::catalog::embedded_skus("eastus")[0].clone()
        }
    }

    fn quotas() -> Quotas {
        let mut q = Quotas::default();
        q.add_page(&json!({"value": [
            {"name": {"value": "standardDSv5Family", "localizedValue": "Standard DSv5 Family vCPUs"},
             "currentValue": 8, "limit": 16, "unit": "Count"},
            {"name": {"value": "cores", "localizedValue": "Total Regional vCPUs"},
             "currentValue": 8, "limit": 100, "unit": "Count"},
            {"name": {"value": "lowPriorityCores", "localizedValue": "Total Regional Low-priority vCPUs"},
             "currentValue": 0, "limit": 4, "unit": "Count"}
        ]}));
        q
    }

    #[test]
    fn a_family_takes_vms_while_it_has_vcpus_left() {
        let mut q = quotas();
        let d8 = sku("Standard_D8s_v5", "standardDSv5Family", 8);
        assert_eq!(q.shortfall(&d8, false), None);
        q.launch(&d8.arm_family, d8.vcpu, false);
        assert_eq!(
            q.shortfall(&d8, false).as_deref(),
            Some("family standardDSv5Family: 16 of 16 vCPUs used; Standard_D8s_v5 needs 8")
        );
        // Another family is held back by the regional total alone.
        let e8 = sku("Standard_E8s_v5", "standardESv5Family", 8);
        assert_eq!(q.shortfall(&e8, false), None);
    }

    #[test]
    fn spot_draws_on_the_spot_quota_only() {
        let q = quotas();
        let d2 = sku("Standard_D2s_v5", "standardDSv5Family", 2);
        let d8 = sku("Standard_D8s_v5", "standardDSv5Family", 8);
        assert_eq!(q.shortfall(&d2, true), None);
        assert!(
            q.shortfall(&d8, true)
                .is_some_and(|m| m.starts_with("spot (lowPriorityCores): 0 of 4")),
        );
    }

    #[test]
    fn a_vm_counted_already_is_over_only_when_the_counted_vms_are() {
        let mut q = quotas();
        let d8 = sku("Standard_D8s_v5", "standardDSv5Family", 8);
        q.launch(&d8.arm_family, d8.vcpu, false);
        assert_eq!(q.over(&d8, false), None, "8 + 8 of 16");
        q.launch(&d8.arm_family, d8.vcpu, false);
        assert_eq!(
            q.over(&d8, false).as_deref(),
            Some("family standardDSv5Family: 16 of 16 vCPUs used; Standard_D8s_v5 needs 8")
        );
    }

    #[test]
    fn a_read_survives_the_cache() {
        let q = quotas();
        assert_eq!(Quotas::parse(&q.render()), q);
    }
}
