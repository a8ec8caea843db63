//! Turns the final state into a [`Plan`].

use crate::intern::FxHashMap;
use crate::plan::{NewNodeClaim, OfferingChoice};
use crate::requirements::ValueSet;
use crate::snapshot::{MinValuesPolicy, Requirement};

/// The plan's instance-type name table and, per pool and type, its index.
pub(crate) fn name_table(p: &Prepared) -> (Vec<String>, Vec<Vec<u32>>) {
    let mut all: Vec<&str> = p
        .pools
        .iter()
        .flat_map(|pc| pc.types.iter().map(|t| t.name.as_str()))
        .collect();
    all.sort_unstable();
    all.dedup();
    let index = p
        .pools
        .iter()
        .map(|pc| {
            pc.types
                .iter()
                .map(|t| all.binary_search(&t.name.as_str()).unwrap_or(0) as u32)
                .collect()
        })
        .collect();
    (all.into_iter().map(str::to_string).collect(), index)
}

use super::prepare::{OfferingC, Prepared, offering_fits};
use super::state::Claim;

/// Per pool and offering-key sets: for each instance type, its available
/// offerings that fit, cheapest first. NodeClaims share a handful of these.
#[derive(Default)]
pub(crate) struct OfferingCache {
    by_state: FxHashMap<OfferingState, Fitting>,
}

/// Per instance type, the available offerings that fit (cheapest first), and
/// how many zones and capacity types they span over all types.
struct Fitting {
    offerings: Vec<Vec<u16>>,
    spans: [usize; 2],
}

/// A pool and its NodeClaim's sets on the offering keys.
type OfferingState = (usize, Vec<Option<ValueSet>>);

impl OfferingCache {
    /// Per instance type of the claim's pool, its available offerings that
    /// fit the claim, cheapest first.
    pub(crate) fn fitting_offerings(&mut self, p: &Prepared, claim: &Claim) -> &[Vec<u16>] {
        &self.fitting(p, claim).offerings
    }

    fn fitting(&mut self, p: &Prepared, claim: &Claim) -> &Fitting {
        let pc = &p.pools[claim.pool];
        let key: Vec<Option<ValueSet>> = pc
            .offering_keys
            .iter()
            .map(|&k| claim.reqs.get(k).cloned())
            .collect();
        self.by_state.entry((claim.pool, key)).or_insert_with(|| {
            let offerings: Vec<Vec<u16>> = pc
                .types
                .iter()
                .map(|t| {
                    t.offerings
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.available && offering_fits(o, &claim.reqs, &p.strings))
                        .map(|(i, _)| i as u16)
                        .collect()
                })
                .collect();
            let span = |key: u32| {
                let mut seen: Vec<u32> = Vec::new();
                for (t, offs) in offerings.iter().enumerate() {
                    for &o in offs {
                        let o = &pc.types[t].offerings[o as usize];
                        if let Some(v) = o.reqs.get(key).and_then(|s| s.finite_values()) {
                            seen.extend_from_slice(v);
                        }
                    }
                }
                seen.sort_unstable();
                seen.dedup();
                seen.len()
            };
            let spans = [span(p.keys.zone), span(p.keys.capacity_type)];
            Fitting { offerings, spans }
        })
    }
}

/// The types a NodeClaim may still become, each with its cheapest available
/// offering that fits the claim, cheapest first (then by name): the order a
/// [`NewNodeClaim`] lists them in.
pub(crate) fn priced_types<'p>(
    p: &'p Prepared,
    claim: &Claim,
    cache: &mut OfferingCache,
) -> Vec<(usize, &'p OfferingC)> {
    let pc = &p.pools[claim.pool];
    let fitting = &cache.fitting(p, claim).offerings;
    let mut types: Vec<(usize, &OfferingC)> = claim
        .mask
        .ones()
        .filter_map(|t| {
            fitting[t]
                .first()
                .map(|&o| (t, &pc.types[t].offerings[o as usize]))
        })
        .collect();
    types.sort_by(|a, b| {
        a.1.price
            .total_cmp(&b.1.price)
            .then_with(|| pc.types[a.0].name.cmp(&pc.types[b.0].name))
    });
    types
}

/// The NodeClaim as the host will create it, or why it cannot be made
/// (minValues lost when truncating to the cheapest types, Strict policy).
/// `names[pool][type]`: the type's index in [`crate::Plan::instance_types`].
pub(crate) fn node_claim(
    p: &Prepared,
    claim: &Claim,
    cache: &mut OfferingCache,
    names: &[Vec<u32>],
) -> Result<NewNodeClaim, String> {
    let pc = &p.pools[claim.pool];
    let strings = &p.strings;
    let mut types = priced_types(p, claim, cache);
    types.truncate(p.options.max_instance_types.max(1));
    let cached = cache.fitting(p, claim);
    let fitting = &cached.offerings;

    let mut kept = crate::bitset::Bits::empty(pc.types.len());
    for (t, _) in &types {
        kept.set(*t);
    }
    let mut min_values: Vec<(u32, u32)> = Vec::new();
    for &(key, min) in pc.reqs.min_values() {
        let have = super::state::distinct_values(p, claim.pool, &kept, key) as u32;
        if have < min {
            if p.options.min_values_policy == MinValuesPolicy::Strict {
                return Err(format!(
                    "minValues {min} for {} not met by the {} cheapest instance types (only {have})",
                    strings.str(key),
                    types.len()
                ));
            }
            min_values.push((key, have));
        } else {
            min_values.push((key, min));
        }
    }

    // Zone and capacity type narrowed to what the kept types' offerings allow.
    let narrow = |key: u32, set: &ValueSet| -> ValueSet {
        let span = if key == p.keys.zone {
            cached.spans[0]
        } else {
            cached.spans[1]
        };
        let mut values = Vec::new();
        for (t, _) in &types {
            if values.len() >= span {
                // Every value the offerings can have is already in.
                break;
            }
            for &o in &fitting[*t] {
                let o = &pc.types[*t].offerings[o as usize];
                match o.reqs.get(key).and_then(|s| s.finite_values()) {
                    Some(v) => {
                        for x in v {
                            if !values.contains(x) {
                                values.push(*x);
                            }
                        }
                    }
                    None => return set.clone(),
                }
            }
        }
        set.intersect(&ValueSet::finite(values), strings)
    };

    let mut requirements: Vec<Requirement> = Vec::new();
    for (key, set) in claim.reqs.entries() {
        if *key == p.keys.instance_type {
            continue;
        }
        let set = if *key == p.keys.zone || *key == p.keys.capacity_type {
            narrow(*key, set)
        } else {
            set.clone()
        };
        requirements.extend(set.to_requirement(strings.str(*key), strings));
    }
    for key in [p.keys.zone, p.keys.capacity_type] {
        if claim.reqs.get(key).is_none() {
            let set = narrow(key, &ValueSet::any());
            if set.finite_values().is_some() {
                requirements.extend(set.to_requirement(strings.str(key), strings));
            }
        }
    }
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    let mut instance_type_min_values = None;
    for (key, min) in min_values {
        if key == p.keys.instance_type {
            instance_type_min_values = Some(min);
            continue;
        }
        let name = strings.str(key);
        if let Some(r) = requirements.iter_mut().find(|r| r.key == name) {
            r.min_values = Some(min);
        }
    }
    let cheapest = types.first().map(|(t, o)| OfferingChoice {
        instance_type: pc.types[*t].name.clone(),
        zone: o.zone.clone(),
        capacity_type: o.capacity_type.clone(),
        price: o.price,
        price_overlay: o.price_overlay.clone(),
    });
    // Names are gathered by reference: a NodeClaim keeps hundreds of types.
    let mut price_overlays: Vec<&str> = Vec::new();
    let mut capacity_overlays: Vec<&str> = Vec::new();
    for (t, _) in &types {
        let ty = &pc.types[*t];
        for (names, into) in [
            (&ty.price_overlays, &mut price_overlays),
            (&ty.capacity_overlays, &mut capacity_overlays),
        ] {
            for n in names {
                if !into.contains(&n.as_str()) {
                    into.push(n);
                }
            }
        }
    }
    let owned = |mut names: Vec<&str>| -> Vec<String> {
        names.sort_unstable();
        names.into_iter().map(str::to_string).collect()
    };
    let (price_overlays, capacity_overlays) = (owned(price_overlays), owned(capacity_overlays));
    Ok(NewNodeClaim {
        node_pool: pc.name.clone(),
        requirements,
        instance_types: types.iter().map(|(t, _)| names[claim.pool][*t]).collect(),
        instance_type_min_values,
        requests: p.resources.list(&claim.requests),
        cheapest,
        // Filled in once placements are sorted.
        pods: Vec::new(),
        price_overlays,
        capacity_overlays,
    })
}
