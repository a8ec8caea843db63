//! CapacityBuffer room as load. A buffer's virtual pods arrive pending; the
//! room they fit in the cluster as it stands is theirs, so each pod that
//! fits is bound where it fits before anything is decided: a node holding
//! room is not empty, and consolidating it must find the room elsewhere, as
//! it must for real pods. Virtual pods that fit nowhere stay pending, like
//! any pending pod (a simulation may leave them so).

use std::collections::BTreeMap;

use crate::scheduler::run::Run;
use crate::scheduler::state::Spot;

use super::cluster::{Cluster, NodeView};
use super::expiration;
use super::plan::{KeepKind, KeepReason};
use super::simulation::Inputs;
use super::snapshot::{DisruptionSnapshot, NodePod};

/// The snapshot with every virtual pod that fits bound to the node it fits
/// on; `None` when there is no virtual pod.
pub(crate) fn settle(s: &DisruptionSnapshot) -> Option<DisruptionSnapshot> {
    if !s.pending_pods.iter().any(|p| p.buffer.is_some()) {
        return None;
    }
    // (pending pod, node) by uid and name: the cluster's views borrow `s`.
    let mut bound: Vec<(String, String)> = Vec::new();
    {
        let c = Cluster::new(s);
        let expired = expiration::expired(&c);
        let inputs = Inputs::new(&c, &[], &expired);
        let p = inputs.prepare(&c);
        let removed: Vec<bool> = p
            .nodes
            .iter()
            .map(|n| {
                let i = n.source as usize;
                c.nodes[i].node.deleting || expired[i]
            })
            .collect();
        // Every pending pod, as provisioning places them: real pods first,
        // so the buffer holds the room they leave.
        let run = Run::new(&p, &removed, (0..p.pods.len() as u32).collect());
        for (i, spot) in run.spots.iter().enumerate() {
            let pod = p.pods[run.pods[i] as usize].pod;
            if let (Some(Spot::Node(n)), Some(_)) = (spot, &pod.buffer) {
                bound.push((pod.uid.clone(), p.nodes[*n].name.clone()));
            }
        }
    }
    let moved: BTreeMap<String, String> = bound.into_iter().collect();
    let mut out = s.clone();
    let index: BTreeMap<String, usize> = out
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let pending = std::mem::take(&mut out.pending_pods);
    for pod in pending {
        match moved.get(&pod.uid).and_then(|name| index.get(name)) {
            Some(&n) => out.nodes[n].pods.push(NodePod {
                pod,
                ..NodePod::default()
            }),
            None => out.pending_pods.push(pod),
        }
    }
    Some(out)
}

/// What a kept node holds for CapacityBuffers, one reason per buffer, so
/// that `karpenter explain` says why an idle node stays.
pub(crate) fn held(n: &NodeView) -> Vec<KeepReason> {
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for p in &n.pods {
        if let Some(b) = &p.pod.buffer {
            *count.entry(b).or_default() += 1;
        }
    }
    count
        .into_iter()
        .map(|(b, pods)| KeepReason {
            kind: KeepKind::Unconsolidatable,
            message: format!("Holds room for {pods} pod(s) of CapacityBuffer {b}"),
        })
        .collect()
}
