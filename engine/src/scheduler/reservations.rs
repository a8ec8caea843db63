//! Reserved capacity (Karpenter's `ReservedCapacity` feature): an offering of
//! `karpenter.sh/capacity-type: reserved` draws on a reservation with a count
//! of instances left.
//!
//! A new NodeClaim that fits a reservation with a slot left takes one and is
//! narrowed to that reservation's offerings, so its provider cannot launch it
//! into another one; reserved capacity is taken before anything else, as
//! Karpenter takes it. The count goes down as NodeClaims take slots; a
//! NodeClaim that finds every reservation it fits taken launches from its
//! other offerings. A NodeClaim written but not launched yet holds its slot
//! here, since its provider cannot count it yet.
//!
//! Offerings share a reservation when they have the same further requirements
//! (a reservation id label, say); an offering with none is a reservation of
//! its own type and zone. Seen in several catalogs (one per NodePool), a
//! reservation counts the fewest instances any of them has left, as
//! Karpenter's does.

use std::collections::BTreeMap;

use crate::bitset::Bits;
use crate::requirements::ValueSet;
use crate::snapshot::{InstanceType, Labels, NodePool, Offering, Operator, Requirement};
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE, RESERVED, ZONE};

use super::output::OfferingCache;
use super::prepare::{NodeRef, Prepared};
use super::state::Claim;

#[derive(Debug, Clone, Default)]
pub(crate) struct Reservations {
    enabled: bool,
    ids: BTreeMap<String, u32>,
    pub(crate) list: Vec<Reservation>,
}

#[derive(Debug, Clone)]
pub(crate) struct Reservation {
    /// How messages name it.
    pub(crate) name: String,
    /// Instances left for new NodeClaims.
    pub(crate) left: u32,
    requirements: Vec<Requirement>,
    zone: Option<String>,
    /// Only for a reservation known by its type and zone alone.
    instance_type: Option<String>,
}

/// The reservation an offering draws on, as a canonical name; `None` for an
/// offering that is not reserved or has no count.
fn key(it: &InstanceType, o: &Offering) -> Option<String> {
    if o.capacity_type != RESERVED || o.reservation_capacity.is_none() {
        return None;
    }
    if o.requirements.is_empty() {
        return Some(format!(
            "{} in {}",
            it.name,
            o.zone.as_deref().unwrap_or("any zone")
        ));
    }
    let mut parts: Vec<String> = o
        .requirements
        .iter()
        .map(|r| match (r.operator, r.values.as_slice()) {
            (Operator::In, [v]) => format!("{}={v}", r.key),
            (op, values) => format!("{} {op} {}", r.key, values.join(",")),
        })
        .collect();
    parts.sort();
    parts.dedup();
    Some(parts.join(", "))
}

impl Reservations {
    pub(crate) fn new(pools: &[&NodePool], nodes: &[NodeRef], enabled: bool) -> Self {
        let mut by_key: BTreeMap<String, Reservation> = BTreeMap::new();
        if enabled {
            for it in pools.iter().flat_map(|p| p.instance_types.iter()) {
                for o in &it.offerings {
                    let (Some(k), Some(count)) = (key(it, o), o.reservation_capacity) else {
                        continue;
                    };
                    by_key
                        .entry(k)
                        .and_modify(|r| r.left = r.left.min(count))
                        .or_insert_with_key(|k| Reservation {
                            name: k.clone(),
                            left: count,
                            requirements: o.requirements.clone(),
                            zone: o.zone.clone(),
                            instance_type: o.requirements.is_empty().then(|| it.name.clone()),
                        });
                }
            }
        }
        let ids = by_key
            .keys()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u32))
            .collect();
        let mut list: Vec<Reservation> = by_key.into_values().collect();
        for n in nodes {
            if !n.awaiting_launch
                || n.labels.get(CAPACITY_TYPE).map(String::as_str) != Some(RESERVED)
            {
                continue;
            }
            if let Some(r) = list.iter_mut().find(|r| r.holds(n.labels)) {
                r.left = r.left.saturating_sub(1);
            }
        }
        Reservations { enabled, ids, list }
    }

    /// The reservation offering `o` of `it` draws on.
    pub(crate) fn of(&self, it: &InstanceType, o: &Offering) -> Option<u32> {
        if self.list.is_empty() {
            return None;
        }
        key(it, o).and_then(|k| self.ids.get(&k).copied())
    }

    /// Whether a NodeClaim may launch into offering `o` of `it` now.
    pub(crate) fn usable(&self, it: &InstanceType, o: &Offering) -> bool {
        if !o.available || o.reservation_capacity == Some(0) {
            return false;
        }
        if o.capacity_type != RESERVED {
            return true;
        }
        self.enabled
            && self
                .of(it, o)
                .is_none_or(|r| self.list[r as usize].left > 0)
    }

    pub(crate) fn left(&self) -> Vec<u32> {
        self.list.iter().map(|r| r.left).collect()
    }
}

impl Reservation {
    /// Whether a node with these labels is in this reservation.
    fn holds(&self, labels: &Labels) -> bool {
        let label = |k: &str| labels.get(k).map(String::as_str);
        self.zone.as_deref().is_none_or(|z| label(ZONE) == Some(z))
            && self
                .instance_type
                .as_deref()
                .is_none_or(|t| label(INSTANCE_TYPE) == Some(t))
            && self.requirements.iter().all(|r| {
                let v = label(&r.key);
                let listed = v.is_some_and(|v| r.values.iter().any(|x| x == v));
                match r.operator {
                    Operator::In => listed,
                    Operator::NotIn => !listed,
                    Operator::Exists => v.is_some(),
                    Operator::DoesNotExist => v.is_none(),
                    _ => true,
                }
            })
    }
}

/// Takes a reservation slot for `claim` when it fits a reservation with one
/// left (the cheapest such offering's), narrowing it to that reservation;
/// otherwise keeps it off the reserved offerings whose slots earlier
/// NodeClaims took. `left` counts down per reservation. Fails when the claim
/// could launch nothing else.
pub(crate) fn reserve(
    p: &Prepared,
    claim: &mut Claim,
    left: &mut [u32],
    cache: &mut OfferingCache,
) -> Result<(), String> {
    if p.reservations.list.is_empty() {
        return Ok(());
    }
    let pc = &p.pools[claim.pool];
    let fitting = cache.fitting_offerings(p, claim);
    let mut best: Option<(usize, usize, u32)> = None;
    let mut taken: Vec<u32> = Vec::new();
    for t in claim.mask.ones() {
        for &o in &fitting[t] {
            let off = &pc.types[t].offerings[o as usize];
            let Some(r) = off.reservation else { continue };
            if left[r as usize] == 0 {
                taken.push(r);
                continue;
            }
            let better = best.is_none_or(|(bt, bo, _)| {
                let b = &pc.types[bt].offerings[bo];
                off.price
                    .total_cmp(&b.price)
                    .then_with(|| pc.types[t].name.cmp(&pc.types[bt].name))
                    .is_lt()
            });
            if better {
                best = Some((t, o as usize, r));
            }
        }
    }
    if let Some((t, o, r)) = best {
        let mut keep = Bits::empty(pc.types.len());
        for t in claim.mask.ones() {
            if fitting[t]
                .iter()
                .any(|&o| pc.types[t].offerings[o as usize].reservation == Some(r))
            {
                keep.set(t);
            }
        }
        left[r as usize] -= 1;
        claim.mask.and_with(&keep);
        claim
            .reqs
            .add_all(&pc.types[t].offerings[o].reqs, &p.strings);
        return Ok(());
    }
    if taken.is_empty() {
        return Ok(());
    }
    let Some(reserved) = p.strings.lookup(RESERVED) else {
        return Ok(());
    };
    claim.reqs.add(
        p.keys.capacity_type,
        &ValueSet::not_in(vec![reserved]),
        &p.strings,
    );
    let fitting = cache.fitting_offerings(p, claim);
    if claim.mask.ones().any(|t| !fitting[t].is_empty()) {
        return Ok(());
    }
    taken.sort_unstable();
    taken.dedup();
    let names: Vec<&str> = taken
        .iter()
        .map(|&r| p.reservations.list[r as usize].name.as_str())
        .collect();
    Err(format!(
        "every reservation it fits is taken by other NodeClaims ({})",
        names.join("; ")
    ))
}
