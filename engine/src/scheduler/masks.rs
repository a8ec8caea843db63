//! Per-NodePool caches of instance-type bitsets for requirement sets, so that
//! narrowing a NodeClaim's types is an AND of cached masks, not a type scan.

use std::hash::{Hash, Hasher};

use crate::bitset::Bits;
use crate::intern::{FxHashMap, FxHasher};
use crate::requirements::{Reqs, ValueSet};

use super::prepare::{Prepared, offering_fits};

/// Offering-key sets (one per offering key, `None` when unconstrained).
type OfferingSets = Vec<Option<ValueSet>>;

#[derive(Debug, Clone, Default)]
pub(crate) struct PoolMasks {
    /// (key, set) -> types whose own requirement on key is compatible.
    by_key: FxHashMap<u64, Vec<(u32, ValueSet, Bits)>>,
    /// Offering-key sets -> types with an available compatible offering.
    by_offering: FxHashMap<u64, Vec<(OfferingSets, Bits)>>,
    /// (key, value) -> types that can carry `key = value`.
    by_domain: FxHashMap<(u32, u32), Bits>,
}

fn hash_of(h: impl Hash) -> u64 {
    let mut s = FxHasher::default();
    h.hash(&mut s);
    s.finish()
}

impl PoolMasks {
    pub(crate) fn key_mask(
        &mut self,
        p: &Prepared,
        pool: usize,
        key: u32,
        set: &ValueSet,
    ) -> &Bits {
        let h = hash_of((key, set));
        let bucket = self.by_key.entry(h).or_default();
        let i = match bucket.iter().position(|(k, s, _)| *k == key && s == set) {
            Some(i) => i,
            None => {
                let pc = &p.pools[pool];
                let mut m = Bits::empty(pc.types.len());
                for t in 0..pc.types.len() {
                    if pc.type_matches_key(t, key, set, &p.strings) {
                        m.set(t);
                    }
                }
                bucket.push((key, set.clone(), m));
                bucket.len() - 1
            }
        };
        &bucket[i].2
    }

    /// `current(k)` gives the NodeClaim's set on offering key `k`.
    pub(crate) fn offering_mask<'a>(
        &mut self,
        p: &Prepared,
        pool: usize,
        current: impl Fn(u32) -> Option<&'a ValueSet>,
    ) -> &Bits {
        let pc = &p.pools[pool];
        let sets: Vec<Option<&ValueSet>> = pc.offering_keys.iter().map(|&k| current(k)).collect();
        let h = hash_of(&sets);
        let bucket = self.by_offering.entry(h).or_default();
        let found = bucket.iter().position(|(s, _)| {
            s.len() == sets.len() && s.iter().zip(&sets).all(|(a, b)| a.as_ref() == *b)
        });
        let i = match found {
            Some(i) => i,
            None => {
                let mut reqs = Reqs::default();
                for (&k, s) in pc.offering_keys.iter().zip(&sets) {
                    if let Some(s) = s {
                        reqs.put(k, (*s).clone());
                    }
                }
                let mut m = Bits::empty(pc.types.len());
                for t in 0..pc.types.len() {
                    if pc.has_offering(t, &reqs, &p.strings) {
                        m.set(t);
                    }
                }
                bucket.push((sets.into_iter().map(|s| s.cloned()).collect(), m));
                bucket.len() - 1
            }
        };
        &bucket[i].1
    }

    pub(crate) fn domain_mask(&mut self, p: &Prepared, pool: usize, key: u32, value: u32) -> &Bits {
        self.by_domain.entry((key, value)).or_insert_with(|| {
            let pc = &p.pools[pool];
            let set = ValueSet::single(value);
            let is_offering_key = pc.offering_keys.binary_search(&key).is_ok();
            let mut reqs = Reqs::default();
            reqs.put(key, set.clone());
            let mut m = Bits::empty(pc.types.len());
            for t in 0..pc.types.len() {
                let ok = pc.type_matches_key(t, key, &set, &p.strings)
                    && (!is_offering_key
                        || pc.types[t]
                            .offerings
                            .iter()
                            .any(|o| o.available && offering_fits(o, &reqs, &p.strings)));
                if ok {
                    m.set(t);
                }
            }
            m
        })
    }
}
