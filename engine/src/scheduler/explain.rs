//! Why a pod could not be scheduled, in words. Only runs for pods that failed,
//! so it may recompute freely.

use crate::bitset::Bits;
use crate::intern::Interner;
use crate::requirements::Reqs;
use crate::resources::{add, format_amount};
use crate::taints::{describe, first_untolerated};

use super::prepare::{GroupKind, PoolC};
use super::state::{State, names_a_host};

pub(crate) fn explain(st: &mut State, cls: u32) -> String {
    let p = st.p;
    if p.pools.is_empty() {
        return "no nodepool to create a node from, and no existing node fits".to_string();
    }
    let mut parts = Vec::new();
    for pool in 0..p.pools.len() {
        let why = pool_reason(st, cls, pool);
        parts.push(format!(
            "incompatible with nodepool {:?}: {why}",
            p.pools[pool].name
        ));
    }
    parts.join("; ")
}

fn pool_reason(st: &mut State, cls: u32, pool: usize) -> String {
    let p = st.p;
    let pc = &p.pools[pool];
    let class = st.classes[cls as usize].clone();
    let strings = &p.strings;
    if let Some(t) = first_untolerated(&pc.taints, &class.tolerations, class.tolerate_preferred) {
        return format!("did not tolerate taint {}", describe(t));
    }
    if names_a_host(p, &class) {
        let key = strings.str(p.keys.hostname);
        let want = class
            .reqs
            .get(p.keys.hostname)
            .map(|s| s.describe(key, strings))
            .unwrap_or_default();
        return format!(
            "requirement {want} not met: a new node's hostname is not known in advance"
        );
    }
    if let Some(k) = pc.incompatible_key(&class.reqs, strings) {
        let key = strings.str(k);
        let want = class
            .reqs
            .get(k)
            .map(|s| s.describe(key, strings))
            .unwrap_or_default();
        return match pc.reqs.get(k) {
            Some(have) => format!(
                "requirement {want} not met by the nodepool's {}",
                have.describe(key, strings)
            ),
            None => format!("requirement {want} not met: no instance type defines label {key}"),
        };
    }
    if st.pools[pool].nodes_remaining_is_exhausted() {
        return "the nodepool's nodes limit is reached".to_string();
    }
    // Requirements against the instance types.
    let ps = &mut st.pools[pool];
    let mut mask = pc.base_mask.clone();
    for (k, set) in class.reqs.entries() {
        let narrowed = match pc.reqs.get(*k) {
            Some(cs) => cs.intersect(set, strings),
            None => set.clone(),
        };
        let km = ps.masks.key_mask(p, pool, *k, &narrowed);
        if !mask.intersects(km) {
            let names: Vec<&str> = pc
                .base_mask
                .ones()
                .take(5)
                .map(|t| pc.types[t].name.as_str())
                .collect();
            let more = pc.base_mask.count().saturating_sub(names.len());
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            return format!(
                "requirement {} not met by any available instance type ({}{tail})",
                set.describe(strings.str(*k), strings),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        }
        mask.and_with(km);
    }
    let mut merged = pc.reqs.clone();
    merged.add_all(&class.reqs, strings);
    let mut offered = Bits::empty(pc.types.len());
    for t in mask.ones() {
        if pc.has_offering(t, &merged, strings) {
            offered.set(t);
        }
    }
    // Resources, each on its own, then together.
    let mut need = pc.daemon_overhead.clone();
    add(&mut need, &class.requests);
    let mut fit = offered.clone();
    pc.fit_mask(&need, &mut fit);
    if fit.is_empty()
        && let Some(why) = held_back_by_unavailable_offerings(pc, &merged, &need, strings)
    {
        return why;
    }
    if offered.is_empty() {
        return "no available offering (zone, capacity type) for the instance types that meet the requirements".to_string();
    }
    let mut short = Vec::new();
    for (r, &amount) in need.iter().enumerate() {
        if amount <= 0 {
            continue;
        }
        let largest = offered.ones().map(|t| pc.alloc_of(t, r)).max().unwrap_or(0);
        if largest < amount {
            let name = p.resources.name(r);
            short.push(format!(
                "no instance type has enough {name} (requested {}, largest {})",
                format_amount(name, amount),
                format_amount(name, largest.max(0))
            ));
        }
    }
    if !short.is_empty() {
        return short.join(", ");
    }
    if fit.is_empty() {
        let wanted: Vec<String> = need
            .iter()
            .enumerate()
            .filter(|(_, a)| **a > 0)
            .map(|(r, a)| p.resources.describe(r, *a))
            .collect();
        return format!(
            "no instance type has enough resources for {} together (daemonset overhead included)",
            wanted.join(", ")
        );
    }
    if !fit.intersects(&st.pools[pool].limit_mask) {
        let over: Vec<&str> = (0..p.resources.len())
            .filter(|&r| {
                st.pools[pool]
                    .remaining_of(r)
                    .is_some_and(|rem| fit.ones().all(|t| pc.capacity_of(t, r) > rem))
            })
            .map(|r| p.resources.name(r))
            .collect();
        return format!(
            "all available instance types exceed the nodepool's limits: {}",
            if over.is_empty() {
                "combined".to_string()
            } else {
                over.join(", ")
            }
        );
    }
    let topology: Vec<String> = class
        .owned
        .iter()
        .map(|&g| {
            let group = &p.groups[g as usize];
            let what = match group.kind {
                GroupKind::Spread => "topology spread",
                GroupKind::Affinity => "pod affinity",
                GroupKind::AntiAffinity => "pod anti-affinity",
            };
            format!("{what} on {}", strings.str(group.key))
        })
        .collect();
    if !topology.is_empty() {
        return format!("would violate {}", topology.join(", "));
    }
    if st.pool_blocked_by_anti(cls) {
        return "would violate the anti-affinity of pods already placed".to_string();
    }
    if pc.reqs.min_values().is_empty() {
        "host ports or other constraints cannot be met".to_string()
    } else {
        "minValues cannot be met".to_string()
    }
}

/// When no type with an available offering takes the pod but types whose
/// offerings are out of capacity or quota would, that is the reason, not
/// their size. (The pool's type mask leaves out types with nothing
/// available, so every type is looked at.)
fn held_back_by_unavailable_offerings(
    pc: &PoolC,
    reqs: &Reqs,
    need: &[i64],
    strings: &Interner,
) -> Option<String> {
    let mut held_back = Bits::empty(pc.types.len());
    for t in 0..pc.types.len() {
        if pc.type_matches(t, reqs, strings)
            && !pc.has_offering(t, reqs, strings)
            && pc.has_unavailable_offering(t, reqs, strings)
        {
            held_back.set(t);
        }
    }
    pc.fit_mask(need, &mut held_back);
    if held_back.is_empty() {
        return None;
    }
    let names: Vec<&str> = held_back
        .ones()
        .take(3)
        .map(|t| pc.types[t].name.as_str())
        .collect();
    let more = held_back.count() - names.len();
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    Some(format!(
        "the instance types that fit ({}{tail}) have no available offering (zone, capacity type) that meets the requirements: the provider reports them unavailable (out of capacity or quota)",
        names.join(", ")
    ))
}
