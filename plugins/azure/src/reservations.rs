//! Capacity reservation groups (`spec.capacityReservation.groupID`). Each
//! reservation in the group holds so many VMs of one size in one zone (or
//! regionally); it becomes an offering of capacity type `reserved` with what
//! it has left, and a VM launched for it names the group, so that ARM places
//! it on the reservation.
//!
//! What is left is the reservation's capacity less the VMs ARM counts as
//! allocated to it (the group's instance view), read again after every
//! launch into the group and every delete: the host counts its NodeClaims
//! not launched yet. Azure lets a group take more VMs than it reserves
//! (they run as ordinary on-demand capacity), so a reservation with nothing
//! left is offered as full and the host launches on-demand instead.

use crate::arm::Arm;
use crate::armerrors::ArmError;
use crate::catalog::{self, REGIONAL_ZONE};
use crate::settings::Settings;
use crate::vm::COMPUTE_API;
use karpenter_plugin_sdk::prelude::*;
use serde_json::Value;

/// The node label (and offering requirement) naming the group a reserved
/// VM runs in.
pub const LABEL_GROUP: &str = "karpenter.azure.com/capacity-reservation-group";

/// A read of a group is trusted this long, unless a launch or delete of
/// this plugin's comes first.
const TTL: u64 = 30;
const CACHE: &str = "reservations/";

/// `/subscriptions/<s>/resourceGroups/<g>/providers/Microsoft.Compute/capacityReservationGroups/<n>`
#[derive(Debug, Clone, PartialEq)]
pub struct GroupId {
    pub subscription: String,
    pub resource_group: String,
    pub name: String,
}

impl GroupId {
    pub fn parse(id: &str) -> Option<GroupId> {
        let parts: Vec<&str> = id.trim_start_matches('/').split('/').collect();
        let ok = parts.len() == 8
            && parts[0].eq_ignore_ascii_case("subscriptions")
            && parts[2].eq_ignore_ascii_case("resourceGroups")
            && parts[4].eq_ignore_ascii_case("providers")
            && parts[5].eq_ignore_ascii_case("Microsoft.Compute")
            && parts[6].eq_ignore_ascii_case("capacityReservationGroups")
            && parts.iter().all(|p| !p.is_empty());
        ok.then(|| GroupId {
            subscription: parts[1].to_string(),
            resource_group: parts[3].to_string(),
            name: parts[7].to_string(),
        })
    }

    fn path(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/capacityReservationGroups/{}",
            self.subscription, self.resource_group, self.name
        )
    }
}

/// The label value for a group: its name when that is a valid label value,
/// else a stable digest of it.
pub fn label_value(group_name: &str) -> String {
    let valid = !group_name.is_empty()
        && group_name.len() <= 63
        && group_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && group_name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && group_name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        return group_name.to_string();
    }
    let mut h: u64 = 0xcbf29ce484222325;
    for b in group_name.to_ascii_lowercase().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("crg-{h:016x}")
}

/// One reservation of the group, as ARM reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub name: String,
    pub vm_size: String,
    /// The zone label (`westus2-1`), or the regional zone.
    pub zone: String,
    pub capacity: u32,
    pub allocated: u32,
}

impl Reservation {
    pub fn left(&self) -> u32 {
        self.capacity.saturating_sub(self.allocated)
    }
}

/// The reservations of a group: sizes, zones and capacities from its
/// reservations list, VMs allocated from the group's instance view.
pub fn parse(region: &str, group: &Value, members: &[Value]) -> Vec<Reservation> {
    let views = group
        .pointer("/properties/instanceView/capacityReservations")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<Reservation> = members
        .iter()
        .filter(|m| {
            m.pointer("/properties/provisioningState")
                .and_then(Value::as_str)
                .is_none_or(|s| s == "Succeeded")
        })
        .filter_map(|m| {
            let name = m.get("name")?.as_str()?.to_string();
            let vm_size = m.pointer("/sku/name")?.as_str()?.to_string();
            let zone = m
                .pointer("/zones/0")
                .and_then(Value::as_str)
                .map(|n| catalog::zone_label(region, n))
                .unwrap_or_else(|| REGIONAL_ZONE.to_string());
            let requested = m.pointer("/sku/capacity").and_then(Value::as_u64)?;
            let view = views.iter().find(|v| {
                v.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.eq_ignore_ascii_case(&name))
            });
            let util = view.and_then(|v| v.get("utilizationInfo"));
            // What ARM could reserve, when it says, bounds what was asked.
            let current = util
                .and_then(|u| u.get("currentCapacity"))
                .and_then(Value::as_u64)
                .unwrap_or(requested);
            let allocated = util
                .and_then(|u| u.get("virtualMachinesAllocated"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            Some(Reservation {
                name,
                vm_size,
                zone,
                capacity: u32::try_from(requested.min(current)).unwrap_or(u32::MAX),
                allocated: u32::try_from(allocated).unwrap_or(u32::MAX),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn render(rs: &[Reservation]) -> String {
    rs.iter()
        .map(|r| {
            format!(
                "{}\t{}\t{}\t{}\t{}\n",
                r.name, r.vm_size, r.zone, r.capacity, r.allocated
            )
        })
        .collect()
}

fn unrender(text: &str) -> Vec<Reservation> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let [name, vm_size, zone, capacity, allocated] = f.as_slice() else {
                return None;
            };
            Some(Reservation {
                name: name.to_string(),
                vm_size: vm_size.to_string(),
                zone: zone.to_string(),
                capacity: capacity.parse().ok()?,
                allocated: allocated.parse().ok()?,
            })
        })
        .collect()
}

fn cache_key(id: &GroupId) -> String {
    format!("{CACHE}{}", id.path().to_ascii_lowercase())
}

/// The group's reservations now: from the cache, or read from ARM.
pub fn current(s: &Settings, id: &GroupId) -> Result<Vec<Reservation>, String> {
    let key = cache_key(id);
    if let Some(text) = cache::get(&key) {
        return Ok(unrender(&String::from_utf8_lossy(&text)));
    }
    let rs = fetch(s, id)?;
    cache::set(&key, render(&rs).as_bytes(), TTL);
    Ok(rs)
}

/// Forgets every read: a launch into a group or a delete changed what is
/// left.
pub fn invalidate() {
    for k in cache::keys(CACHE) {
        cache::delete(&k);
    }
}

fn fetch(s: &Settings, id: &GroupId) -> Result<Vec<Reservation>, String> {
    let arm = Arm::new(s).map_err(|e| format!("{e:?}"))?;
    let url = format!(
        "{}?api-version={COMPUTE_API}&$expand=instanceView",
        id.path()
    );
    let r = arm.send("GET", &url, None).map_err(|e| format!("{e:?}"))?;
    if !r.is_success() {
        return Err(format!(
            "capacity reservation group {}: {}",
            id.name,
            ArmError::from_body(r.status, &r.body)
        ));
    }
    let group: Value = r.json().map_err(|e| e.to_string())?;
    let location = group
        .get("location")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !location.eq_ignore_ascii_case(&s.location) {
        return Err(format!(
            "capacity reservation group {} is in {location}, not in the cluster's region {}",
            id.name, s.location
        ));
    }
    let mut members = Vec::new();
    arm.pages(
        &format!(
            "{}/capacityReservations?api-version={COMPUTE_API}",
            id.path()
        ),
        "capacity reservations",
        20,
        |page| {
            if let Some(items) = page.get("value").and_then(Value::as_array) {
                members.extend(items.iter().cloned());
            }
        },
    )?;
    Ok(parse(&s.location, &group, &members))
}

/// Adds each reservation's offering to the type of its size, the group as
/// its further requirement.
pub fn add_offerings(types: &mut [InstanceType], group_label: &str, rs: &[Reservation]) {
    for r in rs {
        if let Some(it) = types.iter_mut().find(|t| t.name == r.vm_size) {
            add_reserved_offering(
                it,
                &r.zone,
                r.left(),
                vec![req_in(LABEL_GROUP, &[group_label])],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "/subscriptions/sub-1/resourceGroups/rg-1/providers/Microsoft.Compute/capacityReservationGroups/crg-a";

    #[test]
    fn group_ids_parse_and_name_a_label() {
        let id = GroupId::parse(ID).expect("parses");
        assert_eq!(id.name, "crg-a");
        assert_eq!(id.path(), ID);
        assert!(GroupId::parse("/subscriptions/s/resourceGroups/g").is_none());
        assert_eq!(label_value("crg-a"), "crg-a");
        let long = "x".repeat(80);
        assert!(label_value(&long).starts_with("crg-"));
        assert_eq!(label_value(&long), label_value(&long.to_uppercase()));
        assert!(label_value("-bad").starts_with("crg-"));
    }

    #[test]
    fn reservations_read_capacity_and_allocated_vms() {
        let group = json!({"location": "westus2", "properties": {"instanceView": {"capacityReservations": [
            {"name": "d4-z1", "utilizationInfo": {"currentCapacity": 2,
                "virtualMachinesAllocated": [{"id": "/subscriptions/sub-1/vm-1"}]}},
            {"name": "d8-regional", "utilizationInfo": {"currentCapacity": 1}}
        ]}}});
        let members = vec![
            json!({"name": "d4-z1", "zones": ["1"], "sku": {"name": "Standard_D4s_v5", "capacity": 3},
                   "properties": {"provisioningState": "Succeeded"}}),
            json!({"name": "d8-regional", "sku": {"name": "Standard_D8s_v5", "capacity": 1}}),
            json!({"name": "failed", "sku": {"name": "Standard_D2s_v5", "capacity": 1},
                   "properties": {"provisioningState": "Failed"}}),
        ];
        let rs = parse("westus2", &group, &members);
        assert_eq!(rs.len(), 2, "a failed reservation holds nothing: {rs:?}");
        assert_eq!(rs[0].zone, "westus2-1");
        assert_eq!((rs[0].capacity, rs[0].allocated, rs[0].left()), (2, 1, 1));
        assert_eq!(rs[1].zone, REGIONAL_ZONE);
        assert_eq!(rs[1].left(), 1);
        assert_eq!(unrender(&render(&rs)), rs);
    }

    #[test]
    fn reservations_become_reserved_offerings_of_their_size() {
        let mut types = vec![InstanceType {
            name: "Standard_D4s_v5".into(),
            requirements: vec![
                req_in(labels::CAPACITY_TYPE, &[labels::ON_DEMAND]),
                req_in(labels::ZONE, &["westus2-1"]),
            ],
            offerings: vec![Offering {
                zone: "westus2-1".into(),
                capacity_type: labels::ON_DEMAND.into(),
                price: 0.2,
                available: true,
                reservation_capacity: None,
                requirements: vec![],
            }],
            capacity: vec![],
            overhead: Overhead {
                kube_reserved: vec![],
                system_reserved: vec![],
                eviction_threshold: vec![],
            },
        }];
        let rs = vec![
            Reservation {
                name: "d4".into(),
                vm_size: "Standard_D4s_v5".into(),
                zone: "westus2-1".into(),
                capacity: 2,
                allocated: 2,
            },
            Reservation {
                name: "other".into(),
                vm_size: "Standard_E4s_v5".into(),
                zone: "westus2-1".into(),
                capacity: 2,
                allocated: 0,
            },
        ];
        add_offerings(&mut types, "crg-a", &rs);
        let o = &types[0].offerings[1];
        assert_eq!(o.capacity_type, labels::RESERVED);
        assert_eq!(o.reservation_capacity, Some(0));
        assert!(!o.available, "a full reservation is offered as full");
        assert!(o.price < 0.2 * 1e-6);
        assert_eq!(o.requirements[0].key, LABEL_GROUP);
        assert!(types[0].requirements[0].values.contains(&"reserved".into()));
    }
}
