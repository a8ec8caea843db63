//! NodeOverlays (`karpenter.sh/v1alpha1`, Karpenter's `NodeOverlay` gate):
//! prices and extended resources laid over the catalogs the scheduler sees,
//! as Karpenter lays them.
//!
//! An overlay applies to an instance type of a NodePool when its requirements
//! are met by the NodePool's name (`karpenter.sh/nodepool`), its template
//! labels and the type's own requirements (a key none of them defines is met
//! only by `NotIn` or `DoesNotExist`), and then to those of the type's
//! offerings its requirements allow (an overlay for `spot` reprices only spot
//! offerings). Overlays are taken by weight, heaviest first (equal weights:
//! the name later in the alphabet first). An offering's price is set by the
//! first overlay that reaches it; extended resources merge, the first to
//! name a resource keeping it. An overlay that would set what another of the
//! same weight set (the same offering's price, the same type's resource)
//! conflicts, and none of it applies.

use std::collections::BTreeMap;

use crate::intern::Interner;
use crate::requirements::Reqs;
use crate::snapshot::{InstanceType, Labels, Offering, Operator, Requirement, ResourceList};
use vocabulary::labels::{CAPACITY_TYPE, NODE_POOL, ZONE};

#[derive(Debug, Clone, PartialEq)]
pub struct NodeOverlay {
    pub name: String,
    pub weight: i32,
    pub requirements: Vec<Requirement>,
    pub price: Option<PriceChange>,
    /// Extended resources added to the matching types' capacity.
    pub capacity: ResourceList,
}

/// `price` (a new price) or `priceAdjustment` (a signed amount or percent).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    Set(f64),
    Add(f64),
    Percent(f64),
}

impl PriceChange {
    /// `spec.price`: an unsigned decimal.
    pub fn parse_price(text: &str) -> Result<Self, String> {
        let value: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("price {text:?} is not a decimal"))?;
        if !value.is_finite() || value < 0.0 || text.trim_start().starts_with(['+', '-']) {
            return Err(format!("price {text:?} is not an unsigned decimal"));
        }
        Ok(PriceChange::Set(value))
    }

    /// `spec.priceAdjustment`: `+0.5`, `-0.5`, `+10%` or `-15%`.
    pub fn parse_adjustment(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if !t.starts_with(['+', '-']) {
            return Err(format!("priceAdjustment {text:?} has no sign"));
        }
        let (number, percent) = match t.strip_suffix('%') {
            Some(n) => (n, true),
            None => (t, false),
        };
        let value: f64 = number
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| format!("priceAdjustment {text:?} is not a signed number or percent"))?;
        if percent && value < -100.0 {
            return Err(format!("priceAdjustment {text:?} is below -100%"));
        }
        Ok(if percent {
            PriceChange::Percent(value)
        } else {
            PriceChange::Add(value)
        })
    }

    /// The new price; never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let p = match self {
            PriceChange::Set(v) => v,
            PriceChange::Add(v) => price + v,
            PriceChange::Percent(v) => price * (1.0 + v / 100.0),
        };
        p.max(0.0)
    }
}

/// A NodePool as overlays see it: its name, template labels and catalog.
pub struct OverlayPool<'a> {
    pub name: &'a str,
    pub labels: &'a Labels,
    pub types: &'a [InstanceType],
}

/// What the overlays did.
#[derive(Debug, Default, PartialEq)]
pub struct Overlaid {
    /// Per pool (in the order given): its catalog with the overlays laid
    /// over it, or `None` when no overlay touched it.
    pub pools: Vec<Option<Vec<InstanceType>>>,
    /// Overlays that conflict with another, and with which.
    pub conflicts: BTreeMap<String, String>,
}

/// What one overlay would change, found before anything is changed: an
/// overlay applies whole or not at all.
struct Reach {
    /// (pool, type, offering)
    offerings: Vec<(usize, usize, usize)>,
    /// (pool, type)
    types: Vec<(usize, usize)>,
}

/// Lays `overlays` over every pool's catalog.
pub fn apply(pools: &[OverlayPool], overlays: &[NodeOverlay]) -> Overlaid {
    let mut strings = Interner::default();
    let mut order: Vec<&NodeOverlay> = overlays.iter().collect();
    order.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));

    // Who set each offering's price and each type's resources, and at what weight.
    let mut price_by: BTreeMap<(usize, usize, usize), (&NodeOverlay, i32)> = BTreeMap::new();
    let mut capacity_by: BTreeMap<(usize, usize, &str), (&NodeOverlay, i32)> = BTreeMap::new();
    let mut conflicts = BTreeMap::new();
    let pool_reqs: Vec<Vec<(Reqs, Vec<Reqs>)>> = pools
        .iter()
        .map(|p| {
            p.types
                .iter()
                .map(|t| {
                    let offerings = t
                        .offerings
                        .iter()
                        .map(|o| offering_reqs(o, &mut strings))
                        .collect();
                    (type_reqs(p, t, &mut strings), offerings)
                })
                .collect()
        })
        .collect();
    for overlay in order {
        let wanted = Reqs::from_api(&overlay.requirements, &mut strings);
        let reach = reach(pools, &pool_reqs, &wanted, &strings);
        let conflict = overlay
            .price
            .and_then(|_| {
                reach.offerings.iter().find_map(|at| {
                    price_by
                        .get(at)
                        .filter(|(_, w)| *w == overlay.weight)
                        .map(|(other, _)| other.name.clone())
                })
            })
            .or_else(|| {
                reach.types.iter().find_map(|&(p, t)| {
                    overlay.capacity.keys().find_map(|r| {
                        capacity_by
                            .get(&(p, t, r.as_str()))
                            .filter(|(_, w)| *w == overlay.weight)
                            .map(|(other, _)| other.name.clone())
                    })
                })
            });
        if let Some(other) = conflict {
            conflicts.insert(
                overlay.name.clone(),
                format!("conflicts with NodeOverlay {other} of the same weight"),
            );
            continue;
        }
        if overlay.price.is_some() {
            for at in reach.offerings {
                price_by.entry(at).or_insert((overlay, overlay.weight));
            }
        }
        for (p, t) in reach.types {
            for r in overlay.capacity.keys() {
                capacity_by
                    .entry((p, t, r.as_str()))
                    .or_insert((overlay, overlay.weight));
            }
        }
    }

    let mut out: Vec<Option<Vec<InstanceType>>> = vec![None; pools.len()];
    for (&(p, t, o), (overlay, _)) in &price_by {
        let Some(change) = overlay.price else {
            continue;
        };
        let types = out[p].get_or_insert_with(|| pools[p].types.to_vec());
        let offering = &mut types[t].offerings[o];
        offering.price = change.apply(offering.price);
        offering.price_overlay = Some(overlay.name.clone());
    }
    for (&(p, t, resource), (overlay, _)) in &capacity_by {
        let types = out[p].get_or_insert_with(|| pools[p].types.to_vec());
        let it = &mut types[t];
        if let Some(amount) = overlay.capacity.get(resource) {
            it.capacity.insert(resource.to_string(), *amount);
        }
        if !it.capacity_overlays.contains(&overlay.name) {
            it.capacity_overlays.push(overlay.name.clone());
            it.capacity_overlays.sort();
        }
    }
    Overlaid {
        pools: out,
        conflicts,
    }
}

/// What an overlay's requirements are held against for type `t` of pool `p`.
fn type_reqs(p: &OverlayPool, t: &InstanceType, strings: &mut Interner) -> Reqs {
    let mut api = t.requirements.clone();
    // Zone and capacity type, should the type leave them to its offerings.
    for (key, values) in [
        (
            ZONE,
            t.offerings
                .iter()
                .filter_map(|o| o.zone.as_deref())
                .collect::<Vec<_>>(),
        ),
        (
            CAPACITY_TYPE,
            t.offerings
                .iter()
                .map(|o| o.capacity_type.as_str())
                .collect(),
        ),
    ] {
        if !values.is_empty() && !api.iter().any(|r| r.key == key) {
            api.push(Requirement::new(key, Operator::In, &values));
        }
    }
    api.push(Requirement::new(NODE_POOL, Operator::In, &[p.name]));
    for (k, v) in p.labels.iter() {
        api.push(Requirement::new(k, Operator::In, &[v]));
    }
    Reqs::from_api(&api, strings)
}

/// An offering's requirements: its own, its zone and its capacity type.
fn offering_reqs(o: &Offering, strings: &mut Interner) -> Reqs {
    let mut api = o.requirements.clone();
    if let Some(z) = &o.zone {
        api.push(Requirement::new(ZONE, Operator::In, &[z]));
    }
    api.push(Requirement::new(
        CAPACITY_TYPE,
        Operator::In,
        &[&o.capacity_type],
    ));
    Reqs::from_api(&api, strings)
}

/// The offerings and types an overlay with requirements `wanted` reaches.
fn reach(
    pools: &[OverlayPool],
    pool_reqs: &[Vec<(Reqs, Vec<Reqs>)>],
    wanted: &Reqs,
    strings: &Interner,
) -> Reach {
    let mut out = Reach {
        offerings: Vec::new(),
        types: Vec::new(),
    };
    for (p, pool) in pools.iter().enumerate() {
        for (t, it) in pool.types.iter().enumerate() {
            let (have, offerings) = &pool_reqs[p][t];
            let type_ok = wanted.entries().iter().all(|(k, set)| match have.get(*k) {
                Some(h) => h.compatible(set, strings),
                None => set.allows_absence(),
            });
            if !type_ok {
                continue;
            }
            let mut any = false;
            for (o, own) in offerings.iter().enumerate().take(it.offerings.len()) {
                let fits = wanted
                    .entries()
                    .iter()
                    .all(|(k, set)| own.get(*k).is_none_or(|o| o.compatible(set, strings)));
                if fits {
                    out.offerings.push((p, t, o));
                    any = true;
                }
            }
            if any {
                out.types.push((p, t));
            }
        }
    }
    out
}
