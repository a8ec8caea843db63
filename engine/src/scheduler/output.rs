//! Turns the final state into a [`Plan`].

use crate::labels::INSTANCE_TYPE;
use crate::plan::{NewNodeClaim, OfferingChoice};
use crate::requirements::ValueSet;
use crate::snapshot::{MinValuesPolicy, Requirement};

use super::prepare::{OfferingC, Prepared, offering_fits};
use super::state::Claim;

/// The NodeClaim as the host will create it, or why it cannot be made
/// (minValues lost when truncating to the cheapest types, Strict policy).
pub(crate) fn node_claim(p: &Prepared, claim: &Claim) -> Result<NewNodeClaim, String> {
    let pc = &p.pools[claim.pool];
    let strings = &p.strings;
    let mut types: Vec<(usize, &OfferingC)> = claim
        .mask
        .ones()
        .filter_map(|t| {
            pc.types[t]
                .offerings
                .iter()
                .find(|o| o.available && offering_fits(o, &claim.reqs, strings))
                .map(|o| (t, o))
        })
        .collect();
    types.sort_by(|a, b| {
        a.1.price
            .total_cmp(&b.1.price)
            .then_with(|| pc.types[a.0].name.cmp(&pc.types[b.0].name))
    });
    types.truncate(p.options.max_instance_types.max(1));

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
        let mut values = Vec::new();
        for (t, _) in &types {
            for o in &pc.types[*t].offerings {
                if !(o.available && offering_fits(o, &claim.reqs, strings)) {
                    continue;
                }
                match o.reqs.get(key).and_then(|s| s.finite_values()) {
                    Some(v) => values.extend_from_slice(v),
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
    requirements.push(Requirement {
        key: INSTANCE_TYPE.to_string(),
        operator: crate::snapshot::Operator::In,
        values: types.iter().map(|(t, _)| pc.types[*t].name.clone()).collect(),
        min_values: None,
    });
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    for (key, min) in min_values {
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
    });
    Ok(NewNodeClaim {
        node_pool: pc.name.clone(),
        requirements,
        requests: p.resources.list(&claim.requests),
        cheapest,
        pods: claim
            .pods
            .iter()
            .map(|&i| p.pods[i as usize].pod_ref.clone())
            .collect(),
    })
}
