//! A pod class: a pod shape with some of its preferences relaxed. Pods of one
//! class are interchangeable for scheduling, so checks and caches key on it.

use crate::intern::Interner;
use crate::requirements::Reqs;
use crate::snapshot::{PreferencePolicy, Toleration};

use super::prepare::{PortC, ShapeC};

/// How far a pod's preferences have been relaxed, in Karpenter's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct Relax {
    /// Index of the required node-affinity term in force (terms are ORed).
    required_term: u16,
    pref_affinity_dropped: u16,
    pref_anti_dropped: u16,
    pref_node_dropped: u16,
    anyway_dropped: u16,
    tolerate_preferred: bool,
}

impl Relax {
    pub(crate) fn initial(policy: PreferencePolicy) -> Relax {
        match policy {
            PreferencePolicy::Respect => Relax::default(),
            PreferencePolicy::Ignore => Relax {
                required_term: 0,
                pref_affinity_dropped: u16::MAX,
                pref_anti_dropped: u16::MAX,
                pref_node_dropped: u16::MAX,
                anyway_dropped: u16::MAX,
                tolerate_preferred: true,
            },
        }
    }

    /// The next relaxation step, or `None` when nothing is left to relax.
    /// Order: next required term, heaviest preferred pod affinity, heaviest
    /// preferred anti-affinity, heaviest preferred node affinity, ScheduleAnyway
    /// spread, PreferNoSchedule taints.
    pub(crate) fn next(self, shape: &ShapeC) -> Option<Relax> {
        let len = |v: usize| v.min(u16::MAX as usize) as u16;
        let mut r = self;
        if usize::from(r.required_term) + 1 < shape.required_terms.len() {
            r.required_term += 1;
        } else if r.pref_affinity_dropped < len(shape.affinity_preferred.len()) {
            r.pref_affinity_dropped += 1;
        } else if r.pref_anti_dropped < len(shape.anti_preferred.len()) {
            r.pref_anti_dropped += 1;
        } else if r.pref_node_dropped < len(shape.preferred_terms.len()) {
            r.pref_node_dropped += 1;
        } else if r.anyway_dropped < len(shape.spread_anyway.len()) {
            r.anyway_dropped += 1;
        } else if !r.tolerate_preferred {
            r.tolerate_preferred = true;
        } else {
            return None;
        }
        Some(r)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Class {
    pub(crate) label_set: u32,
    pub(crate) requests: Vec<i64>,
    /// Node requirements in force.
    pub(crate) reqs: Reqs,
    pub(crate) tolerations: Vec<Toleration>,
    pub(crate) tolerate_preferred: bool,
    pub(crate) ports: Vec<PortC>,
    /// Topology groups the pod must satisfy.
    pub(crate) owned: Vec<u32>,
    /// Anti-affinity groups among `owned`, whose domains it then blocks.
    pub(crate) anti: Vec<u32>,
}

fn tail(v: &[u32], dropped: u16) -> &[u32] {
    v.get(usize::from(dropped)..).unwrap_or(&[])
}

impl Class {
    pub(crate) fn compile(shape: &ShapeC, relax: Relax, strings: &Interner) -> Class {
        let mut reqs = shape.selector_reqs.clone();
        if let Some(term) = shape.required_terms.get(usize::from(relax.required_term)) {
            reqs.add_all(term, strings);
        }
        if let Some(term) = shape
            .preferred_terms
            .get(usize::from(relax.pref_node_dropped))
        {
            reqs.add_all(term, strings);
        }
        let mut owned = Vec::new();
        owned.extend_from_slice(&shape.spread_required);
        owned.extend_from_slice(tail(&shape.spread_anyway, relax.anyway_dropped));
        owned.extend_from_slice(&shape.affinity_required);
        owned.extend_from_slice(tail(&shape.affinity_preferred, relax.pref_affinity_dropped));
        let mut anti = shape.anti_required.clone();
        anti.extend_from_slice(tail(&shape.anti_preferred, relax.pref_anti_dropped));
        owned.extend_from_slice(&anti);
        Class {
            label_set: shape.label_set,
            requests: shape.requests.clone(),
            reqs,
            tolerations: shape.tolerations.clone(),
            tolerate_preferred: relax.tolerate_preferred,
            ports: shape.ports.clone(),
            owned,
            anti,
        }
    }
}
