//! The mutable side of one scheduling run: node usage, new NodeClaims,
//! topology counts, remaining limits and caches.

use crate::bitset::Bits;
use crate::intern::FxHashMap;
use crate::requirements::{Reqs, ValueSet};
use crate::resources::add;
use crate::selector::label_value;
use crate::snapshot::MinValuesPolicy;
use crate::taints::first_untolerated;

use super::class::{Class, Relax};
use super::masks::PoolMasks;
use super::order::ClaimOrder;
use super::prepare::{GroupKind, PortC, Prepared};
use super::topology::Topology;

#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) pool: usize,
    pub(crate) reqs: Reqs,
    /// Instance types still possible: compatible, available, big enough.
    pub(crate) mask: Bits,
    /// Pods' requests plus daemonset overhead.
    pub(crate) requests: Vec<i64>,
    pub(crate) ports: Vec<PortC>,
    pub(crate) pods: Vec<u32>,
    /// Per topology key (`State::topo_keys`): the one domain the claim is
    /// narrowed to, or `u32::MAX`.
    fixed: Vec<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct PoolState {
    pub(crate) masks: PoolMasks,
    remaining: Vec<Option<i64>>,
    nodes_remaining: Option<i64>,
    /// `base_mask` less the types whose capacity exceeds what the limits leave.
    pub(crate) limit_mask: Bits,
}

impl PoolState {
    pub(crate) fn nodes_remaining_is_exhausted(&self) -> bool {
        self.nodes_remaining.is_some_and(|n| n <= 0)
    }

    pub(crate) fn remaining_of(&self, r: usize) -> Option<i64> {
        self.remaining.get(r).copied().flatten()
    }
}

/// The outcome of the last successful [`State::try_claim`], ready to commit;
/// reused between trials so that trying allocates nothing.
#[derive(Default)]
struct Scratch {
    changes: Vec<(u32, ValueSet)>,
    mask: Bits,
    requests: Vec<i64>,
    candidates: Vec<u32>,
}

/// Why a trial failed: `Permanent` failures cannot turn into successes as the
/// NodeClaim fills up (it only narrows), so the class skips it from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    Permanent,
    ForNow,
}

/// A growable bitset over NodeClaim ids.
#[derive(Debug, Clone, Default)]
struct ClaimSet(Vec<u64>);

impl ClaimSet {
    fn has(&self, c: usize) -> bool {
        self.0.get(c / 64).is_some_and(|w| w & (1 << (c % 64)) != 0)
    }
    fn insert(&mut self, c: usize) {
        if self.0.len() <= c / 64 {
            self.0.resize(c / 64 + 1, 0);
        }
        self.0[c / 64] |= 1 << (c % 64);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spot {
    Node(usize),
    Claim(usize),
}

pub(crate) struct State<'p> {
    pub(crate) p: &'p Prepared<'p>,
    pub(crate) classes: Vec<Class>,
    class_ids: FxHashMap<(u32, Relax), u32>,
    pub(crate) topo: Topology,
    nodes: usize,
    /// Per existing node and resource (`nodes * resources`): what is in use.
    used: Vec<i64>,
    /// Per existing node: host ports taken by pods placed in this run (those
    /// of its bound pods are in [`NodeC::ports`]).
    ports: Vec<Vec<PortC>>,
    /// Existing nodes pods may go to, in order: all but the removed ones.
    usable: Vec<usize>,
    pub(crate) claims: Vec<Claim>,
    order: ClaimOrder,
    pub(crate) pools: Vec<PoolState>,
    /// Per class, per pool: 0 unknown, 1 taints tolerated and requirements
    /// compatible, 2 not.
    pool_ok: Vec<Vec<u8>>,
    /// Per class: NodeClaims it can never join.
    rejected: Vec<ClaimSet>,
    /// Per class: a hostname group that needs an empty slot (own anti-affinity,
    /// or self-selecting spread with maxSkew 1).
    empty_slot_group: Vec<Option<u32>>,
    /// Per such group: NodeClaims that may still have none of its pods.
    free: FxHashMap<u32, Vec<u32>>,
    scratch: Scratch,
    /// Non-hostname topology keys, sorted.
    topo_keys: Vec<u32>,
    /// For the pod being placed, per topology key: the domains its topology
    /// rules allow (empty when it has no rule on that key).
    allowed: Vec<Vec<bool>>,
}

fn current<'a>(changes: &'a [(u32, ValueSet)], reqs: &'a Reqs, key: u32) -> Option<&'a ValueSet> {
    changes
        .iter()
        .rev()
        .find(|c| c.0 == key)
        .map(|c| &c.1)
        .or_else(|| reqs.get(key))
}

/// The topology groups a pod of `class` answers to: those it owns (`true`),
/// then existing pods' anti-affinity groups that select it (`false`).
fn topology_rules<'a>(
    p: &'a Prepared<'_>,
    topo: &'a Topology,
    class: &'a Class,
) -> impl Iterator<Item = (u32, bool)> + Clone + 'a {
    let ls = &p.label_sets[class.label_set as usize];
    let inverse = ls.counted_in.iter().copied().filter(move |&g| {
        p.groups[g as usize].kind == GroupKind::AntiAffinity && topo.has_owners(g)
    });
    class
        .owned
        .iter()
        .map(|&g| (g, true))
        .chain(inverse.map(|g| (g, false)))
}

fn set_change(changes: &mut Vec<(u32, ValueSet)>, key: u32, set: ValueSet) {
    match changes.iter_mut().find(|c| c.0 == key) {
        Some(c) => c.1 = set,
        None => changes.push((key, set)),
    }
}

impl<'p> State<'p> {
    /// A fresh run. `removed[n]` leaves existing node `n` out, as disruption
    /// simulates: its pods are not counted and nothing lands on it. Its
    /// capacity still counts against limits, as until it is gone it does.
    pub(crate) fn new(p: &'p Prepared<'p>, removed: &[bool]) -> Self {
        let is_removed = |n: usize| removed.get(n).copied().unwrap_or(false);
        // Counted once per prepared snapshot; only what leaves is taken out.
        let mut topo = p.start.topo.clone();
        for (n, node) in p.nodes.iter().enumerate() {
            if !is_removed(n) {
                continue;
            }
            for bp in &node.bound {
                for &g in &p.label_sets[bp.label_set as usize].counted_in {
                    if let Some(d) = node_domain(p, n, p.groups[g as usize].key) {
                        topo.unrecord(g, d);
                    }
                }
                for &g in &bp.anti {
                    if let Some(d) = node_domain(p, n, p.groups[g as usize].key) {
                        topo.unrecord_owner(g, d);
                    }
                }
            }
        }
        let pools = p.start.pools.clone();
        State {
            p,
            classes: Vec::new(),
            class_ids: FxHashMap::default(),
            topo,
            nodes: p.nodes.len(),
            used: p.start.used.clone(),
            ports: vec![Vec::new(); p.nodes.len()],
            usable: (0..p.nodes.len()).filter(|&n| !is_removed(n)).collect(),
            claims: Vec::new(),
            order: ClaimOrder::default(),
            pools,
            pool_ok: Vec::new(),
            rejected: Vec::new(),
            empty_slot_group: Vec::new(),
            free: FxHashMap::default(),
            scratch: Scratch::default(),
            topo_keys: {
                let mut k: Vec<u32> = p.universes.keys().copied().collect();
                k.sort_unstable();
                k
            },
            allowed: Vec::new(),
        }
    }

    /// Whether pods already placed keep this class away by their anti-affinity.
    pub(crate) fn pool_blocked_by_anti(&self, cls: u32) -> bool {
        let p = self.p;
        let class = &self.classes[cls as usize];
        p.label_sets[class.label_set as usize]
            .counted_in
            .iter()
            .any(|&g| {
                p.groups[g as usize].kind == GroupKind::AntiAffinity && self.topo.has_owners(g)
            })
    }

    pub(crate) fn class_for(&mut self, shape: u32, relax: Relax) -> u32 {
        if let Some(&c) = self.class_ids.get(&(shape, relax)) {
            return c;
        }
        let id = self.classes.len() as u32;
        let p = self.p;
        let class = Class::compile(&p.shapes[shape as usize], relax, &p.strings);
        let ls = &p.label_sets[class.label_set as usize];
        let empty_slot = class.owned.iter().copied().find(|&g| {
            let group = &p.groups[g as usize];
            group.key == p.keys.hostname
                && match group.kind {
                    GroupKind::AntiAffinity => true,
                    GroupKind::Spread => {
                        group.max_skew <= 1 && ls.counted_in.binary_search(&g).is_ok()
                    }
                    GroupKind::Affinity => false,
                }
        });
        if let Some(g) = empty_slot.filter(|g| !self.free.contains_key(g)) {
            {
                let base = self.nodes as u32;
                let list = (0..self.claims.len() as u32)
                    .filter(|&c| self.topo.count(g, base + c) == 0)
                    .collect();
                self.free.insert(g, list);
            }
        }
        self.classes.push(class);
        self.pool_ok.push(vec![0; p.pools.len()]);
        self.rejected.push(ClaimSet::default());
        self.empty_slot_group.push(empty_slot);
        self.class_ids.insert((shape, relax), id);
        id
    }

    /// Places pod `pod` of class `cls`: its `nominated` node, then existing
    /// nodes (only initialized ones when `settled_only`), then new NodeClaims
    /// fewest pods first, then a new NodeClaim from the first pool that fits.
    pub(crate) fn place(
        &mut self,
        pod: u32,
        cls: u32,
        settled_only: bool,
        nominated: Option<u32>,
    ) -> Option<Spot> {
        if let Some(n) = nominated.map(|n| n as usize)
            && self.usable.binary_search(&n).is_ok()
            && (!settled_only || self.p.nodes[n].settled())
            && self.fits_node(n, cls)
        {
            self.commit_node(n, cls);
            return Some(Spot::Node(n));
        }
        for i in 0..self.usable.len() {
            let n = self.usable[i];
            if settled_only && !self.p.nodes[n].settled() {
                continue;
            }
            if self.fits_node(n, cls) {
                self.commit_node(n, cls);
                return Some(Spot::Node(n));
            }
        }
        if let Some(c) = self.place_on_claims(cls) {
            self.commit_claim(c, pod, cls);
            return Some(Spot::Claim(c));
        }
        for pool in 0..self.p.pools.len() {
            if !self.pool_ok(cls, pool) || self.pools[pool].nodes_remaining_is_exhausted() {
                continue;
            }
            if self.try_claim(cls, pool, None).is_ok() {
                let c = self.create_claim(pool, pod, cls);
                return Some(Spot::Claim(c));
            }
        }
        None
    }

    /// Fills `self.allowed` for class `cls`, so NodeClaims narrowed to a
    /// domain its topology rules forbid are skipped without a trial.
    fn compute_allowed(&mut self, cls: u32) {
        let p = self.p;
        let class = &self.classes[cls as usize];
        let ls = &p.label_sets[class.label_set as usize];
        self.allowed.resize(self.topo_keys.len(), Vec::new());
        for a in &mut self.allowed {
            a.clear();
        }
        for (g, is_owner) in topology_rules(p, &self.topo, class) {
            let key = p.groups[g as usize].key;
            let Ok(k) = self.topo_keys.binary_search(&key) else {
                continue;
            };
            let out = &mut self.allowed[k];
            if out.is_empty() {
                out.resize(p.universes.get(&key).map_or(0, Vec::len), true);
            }
            if is_owner {
                let selects_self = ls.counted_in.binary_search(&g).is_ok();
                self.topo.allowed(p, g, selects_self, &class.reqs, out);
            } else {
                self.topo.allowed_by_owners(g, out);
            }
        }
    }

    /// Whether NodeClaim `c` is narrowed to a domain the pod may not use.
    fn ruled_out(&self, c: usize) -> bool {
        let fixed = &self.claims[c].fixed;
        self.allowed.iter().zip(fixed).any(|(a, &d)| {
            d != u32::MAX && !a.is_empty() && !a.get(d as usize).copied().unwrap_or(false)
        })
    }

    /// The first NodeClaim, fewest pods first, that takes the pod.
    fn place_on_claims(&mut self, cls: u32) -> Option<usize> {
        self.compute_allowed(cls);
        if let Some(g) = self.empty_slot_group[cls as usize] {
            // Only NodeClaims without the group's pods can take it: scan those,
            // in the same order as the full scan.
            let base = self.nodes as u32;
            let mut list = self.free.remove(&g).unwrap_or_default();
            list.retain(|&c| self.topo.count(g, base + c) == 0);
            if list.len() * 4 < self.claims.len() {
                list.sort_unstable_by_key(|&c| self.order.position(c));
                let found = list
                    .iter()
                    .map(|&c| c as usize)
                    .find(|&c| self.try_known_claim(cls, c));
                self.free.insert(g, list);
                return found;
            }
            self.free.insert(g, list);
        }
        for i in 0..self.order.len() {
            let c = self.order.at(i) as usize;
            if self.try_known_claim(cls, c) {
                return Some(c);
            }
        }
        None
    }

    fn try_known_claim(&mut self, cls: u32, c: usize) -> bool {
        if self.rejected[cls as usize].has(c) || self.ruled_out(c) {
            return false;
        }
        let pool = self.claims[c].pool;
        if !self.pool_ok(cls, pool) {
            self.rejected[cls as usize].insert(c);
            return false;
        }
        match self.try_claim(cls, pool, Some(c)) {
            Ok(()) => true,
            Err(Miss::Permanent) => {
                self.rejected[cls as usize].insert(c);
                false
            }
            Err(Miss::ForNow) => false,
        }
    }

    pub(crate) fn pool_ok(&mut self, cls: u32, pool: usize) -> bool {
        let p = self.p;
        let known = self.pool_ok[cls as usize][pool];
        if known != 0 {
            return known == 1;
        }
        let class = &self.classes[cls as usize];
        let pc = &p.pools[pool];
        let ok = first_untolerated(&pc.taints, &class.tolerations, class.tolerate_preferred)
            .is_none()
            && !names_a_host(p, class)
            && pc.incompatible_key(&class.reqs, &p.strings).is_none();
        self.pool_ok[cls as usize][pool] = if ok { 1 } else { 2 };
        ok
    }

    pub(crate) fn fits_node(&self, n: usize, cls: u32) -> bool {
        let p = self.p;
        let node = &p.nodes[n];
        let class = &self.classes[cls as usize];
        if first_untolerated(&node.taints, &class.tolerations, class.tolerate_preferred).is_some() {
            return false;
        }
        if class.ports.iter().any(|a| {
            node.ports
                .iter()
                .chain(&self.ports[n])
                .any(|b| a.conflicts(b))
        }) {
            return false;
        }
        if !class.reqs.matches_labels(&node.labels, &p.strings) {
            return false;
        }
        // Checked in place: this runs for every pod on every existing node.
        let width = p.resources.len();
        let fits = self.used[n * width..(n + 1) * width]
            .iter()
            .zip(&class.requests)
            .zip(&node.allocatable)
            .all(|((u, r), a)| u.saturating_add(*r) <= *a);
        if !fits {
            return false;
        }
        let ls = &p.label_sets[class.label_set as usize];
        for &g in &class.owned {
            let Some(d) = node_domain(p, n, p.groups[g as usize].key) else {
                return false;
            };
            let selects_self = ls.counted_in.binary_search(&g).is_ok();
            if self
                .topo
                .choose(p, g, selects_self, &class.reqs, &[d])
                .is_none()
            {
                return false;
            }
        }
        for &g in &ls.counted_in {
            let group = &p.groups[g as usize];
            if group.kind == GroupKind::AntiAffinity
                && self.topo.has_owners(g)
                && node_domain(p, n, group.key).is_some_and(|d| self.topo.owners(g, d) > 0)
            {
                return false;
            }
        }
        true
    }

    fn slot_of_new_claim(&self) -> u32 {
        (self.nodes + self.claims.len()) as u32
    }

    /// Tries the pod on NodeClaim `claim`, or on a fresh one from `pool`; on
    /// success the result waits in `self.scratch` for a commit.
    pub(crate) fn try_claim(
        &mut self,
        cls: u32,
        pool: usize,
        claim: Option<usize>,
    ) -> Result<(), Miss> {
        let mut sc = std::mem::take(&mut self.scratch);
        let result = self.try_claim_into(cls, pool, claim, &mut sc);
        self.scratch = sc;
        result
    }

    fn try_claim_into(
        &mut self,
        cls: u32,
        pool: usize,
        claim: Option<usize>,
        sc: &mut Scratch,
    ) -> Result<(), Miss> {
        use Miss::{ForNow, Permanent};
        let p = self.p;
        let pc = &p.pools[pool];
        let class = &self.classes[cls as usize];
        let ps = &mut self.pools[pool];
        let (reqs, mask, base_requests, ports, slot) = match claim {
            Some(c) => {
                let cl = &self.claims[c];
                (
                    &cl.reqs,
                    &cl.mask,
                    cl.requests.as_slice(),
                    cl.ports.as_slice(),
                    (self.nodes + c) as u32,
                )
            }
            None => (
                &pc.reqs,
                &ps.limit_mask,
                pc.daemon_overhead.as_slice(),
                &[][..],
                (self.nodes + self.claims.len()) as u32,
            ),
        };
        if mask.is_empty()
            || class
                .ports
                .iter()
                .any(|a| ports.iter().any(|b| a.conflicts(b)))
        {
            return Err(Permanent);
        }
        // Hostname rules first: cheap, and final once broken.
        let ls = &p.label_sets[class.label_set as usize];
        let rules = topology_rules(p, &self.topo, class);
        let mut narrowing = false;
        for (g, is_owner) in rules.clone() {
            let group = &p.groups[g as usize];
            if group.key != p.keys.hostname {
                narrowing = true;
                continue;
            }
            let ok = if is_owner {
                let selects_self = ls.counted_in.binary_search(&g).is_ok();
                self.topo
                    .choose(p, g, selects_self, &class.reqs, &[slot])
                    .is_some()
            } else {
                self.topo.owners(g, slot) == 0
            };
            if !ok {
                return Err(if group.kind == GroupKind::Affinity {
                    ForNow
                } else {
                    Permanent
                });
            }
        }

        sc.mask.assign(mask);
        sc.changes.clear();
        let is_offering_key = |k: u32| pc.offering_keys.binary_search(&k).is_ok();
        let mut offering_dirty = false;
        for (k, pset) in class.reqs.entries() {
            let new = match reqs.get(*k) {
                Some(cs) => {
                    if !cs.compatible(pset, &p.strings) {
                        return Err(Permanent);
                    }
                    let n = cs.intersect(pset, &p.strings);
                    if &n == cs {
                        continue;
                    }
                    n
                }
                None => pset.clone(),
            };
            sc.mask.and_with(ps.masks.key_mask(p, pool, *k, &new));
            offering_dirty |= is_offering_key(*k);
            sc.changes.push((*k, new));
        }
        if offering_dirty {
            let changes = &sc.changes;
            sc.mask.and_with(
                ps.masks
                    .offering_mask(p, pool, |k| current(changes, reqs, k)),
            );
            offering_dirty = false;
        }
        if sc.mask.is_empty() {
            return Err(Permanent);
        }

        // Other keys: each rule narrows the NodeClaim to one domain.
        if narrowing {
            for (g, is_owner) in rules {
                let key = p.groups[g as usize].key;
                if key == p.keys.hostname {
                    continue;
                }
                let universe = p.universes.get(&key).map_or(&[][..], Vec::as_slice);
                sc.candidates.clear();
                let cur = current(&sc.changes, reqs, key);
                for (i, &v) in universe.iter().enumerate() {
                    if cur.is_none_or(|s| s.contains(v, &p.strings))
                        && sc.mask.intersects(ps.masks.domain_mask(p, pool, key, v))
                    {
                        sc.candidates.push(i as u32);
                    }
                }
                let chosen = if is_owner {
                    let selects_self = ls.counted_in.binary_search(&g).is_ok();
                    self.topo
                        .choose(p, g, selects_self, &class.reqs, &sc.candidates)
                } else {
                    sc.candidates
                        .iter()
                        .copied()
                        .find(|&d| self.topo.owners(g, d) == 0)
                }
                .ok_or(ForNow)?;
                let value = universe[chosen as usize];
                if cur.and_then(ValueSet::single_value) != Some(value) {
                    sc.mask.and_with(ps.masks.domain_mask(p, pool, key, value));
                    offering_dirty |= is_offering_key(key);
                    set_change(&mut sc.changes, key, ValueSet::single(value));
                }
            }
            if offering_dirty {
                let changes = &sc.changes;
                sc.mask.and_with(
                    ps.masks
                        .offering_mask(p, pool, |k| current(changes, reqs, k)),
                );
            }
        }
        // Once narrowed by topology, a later try may pick another domain.
        let miss = if narrowing { ForNow } else { Permanent };
        sc.requests.clear();
        sc.requests.extend_from_slice(base_requests);
        add(&mut sc.requests, &class.requests);
        pc.fit_mask(&sc.requests, &mut sc.mask);
        if sc.mask.is_empty() {
            return Err(miss);
        }
        if p.options.min_values_policy == MinValuesPolicy::Strict {
            for &(key, min) in pc.reqs.min_values() {
                if distinct_values(p, pool, &sc.mask, key) < min as usize {
                    return Err(miss);
                }
            }
        }
        Ok(())
    }

    fn commit_node(&mut self, n: usize, cls: u32) {
        let class = &self.classes[cls as usize];
        let width = self.p.resources.len();
        add(&mut self.used[n * width..(n + 1) * width], &class.requests);
        self.ports[n].extend(class.ports.iter().cloned());
        self.record(Spot::Node(n), cls);
    }

    fn commit_claim(&mut self, c: usize, pod: u32, cls: u32) {
        let class = &self.classes[cls as usize];
        let claim = &mut self.claims[c];
        let sc = &mut self.scratch;
        for (k, s) in sc.changes.drain(..) {
            claim.reqs.put(k, s);
        }
        std::mem::swap(&mut claim.mask, &mut sc.mask);
        std::mem::swap(&mut claim.requests, &mut sc.requests);
        claim.ports.extend(class.ports.iter().cloned());
        claim.pods.push(pod);
        refresh_fixed(self.p, &self.topo_keys, claim);
        self.order.increment(c as u32);
        self.record(Spot::Claim(c), cls);
    }

    fn create_claim(&mut self, pool: usize, pod: u32, cls: u32) -> usize {
        let p = self.p;
        let pc = &p.pools[pool];
        let mut reqs = pc.reqs.clone();
        let sc = &mut self.scratch;
        for (k, s) in sc.changes.drain(..) {
            reqs.put(k, s);
        }
        let mask = sc.mask.clone();
        let requests = sc.requests.clone();
        // Pessimistic limits: the claim may become its largest remaining type.
        let ps = &mut self.pools[pool];
        for (r, rem) in ps.remaining.iter_mut().enumerate() {
            if let Some(rem) = rem {
                let largest = mask.ones().map(|t| pc.capacity_of(t, r)).max().unwrap_or(0);
                *rem -= largest;
            }
        }
        if let Some(n) = &mut ps.nodes_remaining {
            *n -= 1;
        }
        ps.limit_mask = limit_mask(p, pool, &ps.remaining);
        debug_assert_eq!(
            self.slot_of_new_claim() as usize,
            self.nodes + self.claims.len()
        );
        let c = self.claims.len();
        let mut claim = Claim {
            pool,
            reqs,
            mask,
            requests,
            ports: self.classes[cls as usize].ports.clone(),
            pods: vec![pod],
            fixed: Vec::new(),
        };
        refresh_fixed(p, &self.topo_keys, &mut claim);
        self.claims.push(claim);
        self.order.push(c as u32);
        self.record(Spot::Claim(c), cls);
        let slot = (self.nodes + c) as u32;
        for (&g, list) in self.free.iter_mut() {
            if self.topo.count(g, slot) == 0 {
                list.push(c as u32);
            }
        }
        c
    }

    /// The domains of `key` a spot is in. A NodeClaim not yet narrowed to one
    /// value counts only for anti-affinity (every value it may take, to be safe).
    fn spot_domains(&self, spot: Spot, key: u32, all_if_open: bool, out: &mut Vec<u32>) {
        let p = self.p;
        out.clear();
        match spot {
            Spot::Node(n) => out.extend(node_domain(p, n, key)),
            Spot::Claim(c) => {
                if key == p.keys.hostname {
                    out.push((self.nodes + c) as u32);
                    return;
                }
                let set = self.claims[c].reqs.get(key);
                if let Some(v) = set.and_then(ValueSet::single_value) {
                    out.extend(p.domain_index.get(&(key, v)).copied());
                } else if all_if_open {
                    let universe = p.universes.get(&key).map_or(&[][..], Vec::as_slice);
                    for (i, &v) in universe.iter().enumerate() {
                        if set.is_none_or(|s| s.contains(v, &p.strings)) {
                            out.push(i as u32);
                        }
                    }
                }
            }
        }
    }

    fn record(&mut self, spot: Spot, cls: u32) {
        let p = self.p;
        let class = &self.classes[cls as usize];
        let mut domains = Vec::new();
        for &g in &p.label_sets[class.label_set as usize].counted_in {
            let group = &p.groups[g as usize];
            self.spot_domains(
                spot,
                group.key,
                group.kind == GroupKind::AntiAffinity,
                &mut domains,
            );
            for &d in &domains {
                self.topo.record(g, d);
            }
        }
        for &g in &class.anti {
            self.spot_domains(spot, p.groups[g as usize].key, true, &mut domains);
            for &d in &domains {
                self.topo.record_owner(g, d);
            }
        }
    }
}

fn refresh_fixed(p: &Prepared, topo_keys: &[u32], claim: &mut Claim) {
    claim.fixed.clear();
    for &k in topo_keys {
        let d = claim
            .reqs
            .get(k)
            .and_then(ValueSet::single_value)
            .and_then(|v| p.domain_index.get(&(k, v)).copied());
        claim.fixed.push(d.unwrap_or(u32::MAX));
    }
}

/// What every run starts from, computed once per prepared snapshot: the
/// existing nodes' topology counts and what the NodePools' limits leave.
#[derive(Debug, Clone)]
pub(crate) struct Start {
    topo: Topology,
    pools: Vec<PoolState>,
    /// Per existing node and resource: what its bound pods use.
    used: Vec<i64>,
}

impl Start {
    pub(crate) fn empty() -> Start {
        Start {
            topo: Topology::new(0),
            pools: Vec::new(),
            used: Vec::new(),
        }
    }

    pub(crate) fn new(p: &Prepared) -> Start {
        let mut topo = Topology::new(p.groups.len());
        for (n, node) in p.nodes.iter().enumerate() {
            for bp in &node.bound {
                for &g in &p.label_sets[bp.label_set as usize].counted_in {
                    if let Some(d) = node_domain(p, n, p.groups[g as usize].key) {
                        topo.record(g, d);
                    }
                }
                for &g in &bp.anti {
                    if let Some(d) = node_domain(p, n, p.groups[g as usize].key) {
                        topo.record_owner(g, d);
                    }
                }
            }
        }
        let pools = p
            .pools
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                let mut remaining = pool.limits.clone();
                let mut nodes_remaining = pool.node_limit;
                for node in p.nodes.iter().filter(|n| n.pool == Some(i)) {
                    for (r, cap) in remaining.iter_mut().zip(&node.capacity) {
                        if let Some(r) = r {
                            *r -= cap;
                        }
                    }
                    if let Some(n) = &mut nodes_remaining {
                        *n -= 1;
                    }
                }
                let mut st = PoolState {
                    masks: PoolMasks::default(),
                    remaining,
                    nodes_remaining,
                    limit_mask: Bits::empty(0),
                };
                st.limit_mask = limit_mask(p, i, &st.remaining);
                st
            })
            .collect();
        let used = p
            .nodes
            .iter()
            .flat_map(|n| n.used.iter().copied())
            .collect();
        Start { topo, pools, used }
    }
}

/// Whether the class requires particular hostnames. A new NodeClaim's
/// hostname is not known before it launches (Karpenter gives it a unique
/// placeholder), so such a pod only fits existing nodes.
pub(crate) fn names_a_host(p: &Prepared, class: &Class) -> bool {
    class
        .reqs
        .get(p.keys.hostname)
        .is_some_and(|s| s.finite_values().is_some())
}

/// The domain index of `key` on existing node `n`, if it has the label.
pub(crate) fn node_domain(p: &Prepared, n: usize, key: u32) -> Option<u32> {
    if key == p.keys.hostname {
        return Some(n as u32);
    }
    let v = label_value(&p.nodes[n].labels, key)?;
    p.domain_index.get(&(key, v)).copied()
}

/// Distinct values of `key` among the types in `mask` (for minValues).
pub(crate) fn distinct_values(p: &Prepared, pool: usize, mask: &Bits, key: u32) -> usize {
    let pc = &p.pools[pool];
    let mut seen: Vec<u32> = Vec::new();
    for t in mask.ones() {
        let ty = &pc.types[t];
        let sets = ty.reqs.get(key).into_iter().chain(
            ty.offerings
                .iter()
                .filter(|o| o.available)
                .filter_map(|o| o.reqs.get(key)),
        );
        for s in sets {
            if let Some(vals) = s.finite_values() {
                seen.extend_from_slice(vals);
            }
        }
    }
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Types of the pool that still fit within what the limits leave.
fn limit_mask(p: &Prepared, pool: usize, remaining: &[Option<i64>]) -> Bits {
    let pc = &p.pools[pool];
    let mut m = pc.base_mask.clone();
    if remaining.iter().all(Option::is_none) {
        return m;
    }
    for t in pc.base_mask.ones() {
        let over = remaining
            .iter()
            .enumerate()
            .any(|(r, rem)| rem.is_some_and(|rem| pc.capacity_of(t, r) > rem));
        if over {
            m.clear(t);
        }
    }
    m
}
