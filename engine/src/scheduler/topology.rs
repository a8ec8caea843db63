//! Topology counts: how many selected pods each domain holds, kept up to date
//! as pods are placed instead of recounted.
//!
//! Domains of `kubernetes.io/hostname` are node slots (existing nodes first,
//! then new NodeClaims); domains of other keys index the key's universe.

use super::prepare::{GroupKind, Prepared};

#[derive(Debug, Clone)]
pub(crate) struct Topology {
    /// Per group, per domain: selected pods.
    counts: Vec<Vec<u32>>,
    totals: Vec<u64>,
    /// Per anti-affinity group, per domain: pods owning the term.
    owners: Vec<Vec<u32>>,
    owner_totals: Vec<u64>,
}

fn at(v: &[u32], d: u32) -> u32 {
    v.get(d as usize).copied().unwrap_or(0)
}

fn bump(v: &mut Vec<u32>, d: u32) {
    let d = d as usize;
    if v.len() <= d {
        v.resize(d + 1, 0);
    }
    v[d] += 1;
}

impl Topology {
    pub(crate) fn new(groups: usize) -> Self {
        Topology {
            counts: vec![Vec::new(); groups],
            totals: vec![0; groups],
            owners: vec![Vec::new(); groups],
            owner_totals: vec![0; groups],
        }
    }

    pub(crate) fn count(&self, g: u32, d: u32) -> u32 {
        at(&self.counts[g as usize], d)
    }

    pub(crate) fn owners(&self, g: u32, d: u32) -> u32 {
        at(&self.owners[g as usize], d)
    }

    pub(crate) fn has_owners(&self, g: u32) -> bool {
        self.owner_totals[g as usize] > 0
    }

    pub(crate) fn record(&mut self, g: u32, d: u32) {
        bump(&mut self.counts[g as usize], d);
        self.totals[g as usize] += 1;
    }

    /// Takes back a [`Topology::record`] (a pod whose node is removed).
    pub(crate) fn unrecord(&mut self, g: u32, d: u32) {
        if let Some(c) = self.counts[g as usize].get_mut(d as usize) {
            *c = c.saturating_sub(1);
        }
        self.totals[g as usize] = self.totals[g as usize].saturating_sub(1);
    }

    pub(crate) fn unrecord_owner(&mut self, g: u32, d: u32) {
        if let Some(c) = self.owners[g as usize].get_mut(d as usize) {
            *c = c.saturating_sub(1);
        }
        self.owner_totals[g as usize] = self.owner_totals[g as usize].saturating_sub(1);
    }

    pub(crate) fn record_owner(&mut self, g: u32, d: u32) {
        bump(&mut self.owners[g as usize], d);
        self.owner_totals[g as usize] += 1;
    }

    /// The smallest count among the domains a pod could reach, for skew.
    fn spread_min(&self, p: &Prepared, g: u32, pod_reqs: &crate::requirements::Reqs) -> u32 {
        let group = &p.groups[g as usize];
        if group.key == p.keys.hostname {
            // A new node is always a possible empty domain.
            return 0;
        }
        let Some(universe) = p.universes.get(&group.key) else {
            return 0;
        };
        let filter = if group.honor_affinity {
            pod_reqs.get(group.key)
        } else {
            None
        };
        let mut eligible = 0;
        let mut min = u32::MAX;
        for (i, v) in universe.iter().enumerate() {
            if filter.is_some_and(|f| !f.contains(*v, &p.strings)) {
                continue;
            }
            eligible += 1;
            min = min.min(self.count(g, i as u32));
        }
        if eligible == 0 || eligible < group.min_domains {
            0
        } else {
            min
        }
    }

    /// Marks in `out` (indexed by domain) where a pod owning group `g` may go,
    /// whatever the target; false entries rule a domain out.
    pub(crate) fn allowed(
        &self,
        p: &Prepared,
        g: u32,
        selects_self: bool,
        pod_reqs: &crate::requirements::Reqs,
        out: &mut [bool],
    ) {
        let group = &p.groups[g as usize];
        match group.kind {
            GroupKind::Spread => {
                let min = self.spread_min(p, g, pod_reqs);
                let own = u32::from(selects_self);
                let skew = group.max_skew.max(0) as u32;
                for (d, ok) in out.iter_mut().enumerate() {
                    *ok &= (self.count(g, d as u32) + own).saturating_sub(min) <= skew;
                }
            }
            GroupKind::Affinity => {
                if !(self.totals[g as usize] == 0 && selects_self) {
                    for (d, ok) in out.iter_mut().enumerate() {
                        *ok &= self.count(g, d as u32) > 0;
                    }
                }
            }
            GroupKind::AntiAffinity => {
                for (d, ok) in out.iter_mut().enumerate() {
                    *ok &= self.count(g, d as u32) == 0;
                }
            }
        }
    }

    /// Like [`Topology::allowed`], for a pod that other pods' anti-affinity
    /// group `g` selects.
    pub(crate) fn allowed_by_owners(&self, g: u32, out: &mut [bool]) {
        for (d, ok) in out.iter_mut().enumerate() {
            *ok &= self.owners(g, d as u32) == 0;
        }
    }

    /// Picks the domain among `candidates` (sorted, preferred first) where a pod
    /// owning group `g` may go, or `None`.
    pub(crate) fn choose(
        &self,
        p: &Prepared,
        g: u32,
        selects_self: bool,
        pod_reqs: &crate::requirements::Reqs,
        candidates: &[u32],
    ) -> Option<u32> {
        let group = &p.groups[g as usize];
        match group.kind {
            GroupKind::Spread => {
                let min = self.spread_min(p, g, pod_reqs);
                let own = u32::from(selects_self);
                let skew = group.max_skew.max(0) as u32;
                candidates
                    .iter()
                    .copied()
                    .filter(|&d| (self.count(g, d) + own).saturating_sub(min) <= skew)
                    .min_by_key(|&d| self.count(g, d))
            }
            GroupKind::Affinity => {
                if self.totals[g as usize] == 0 && selects_self {
                    // The first of a self-affine group starts the domain.
                    return candidates.first().copied();
                }
                candidates.iter().copied().find(|&d| self.count(g, d) > 0)
            }
            GroupKind::AntiAffinity => candidates.iter().copied().find(|&d| self.count(g, d) == 0),
        }
    }
}
