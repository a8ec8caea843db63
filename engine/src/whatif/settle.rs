//! Disruption decided again and again on its own results, until it would
//! change nothing more: the end state a pass every few seconds reaches.

use super::apply::{Launched, execute, provision};
use crate::disruption::{DisruptionSnapshot, KeptNode};
use crate::snapshot::{BoundPod, Node, Snapshot};
use serde::{Deserialize, Serialize};

/// One decision carried out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// A disruption method (`Drift`, `SingleNodeConsolidation`, ...) or
    /// `Expiration`.
    pub method: String,
    /// `Drifted`, `Underutilized`, `Empty` or `Expired`.
    pub reason: String,
    pub removed: Vec<String>,
    pub launched: Launched,
    /// $/hour saved by the removal; 0 where the engine prices no saving
    /// (drift, expiration).
    pub savings: f64,
}

/// What settling did, and why each remaining node stays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settled {
    pub steps: Vec<Step>,
    pub kept: Vec<KeptNode>,
    /// True when `max_steps` ran out before the decisions did.
    pub cut_short: bool,
}

/// Decides and executes until no command remains, at most `max_steps`
/// times. Expired nodes go first each round, their pods provisioned anew,
/// as the controller deletes them and then provisions.
pub fn settle(snap: &mut DisruptionSnapshot, max_steps: usize) -> Settled {
    let mut out = Settled::default();
    for _ in 0..max_steps {
        let plan = crate::disrupt(snap);
        out.kept = plan.kept;
        if !plan.expired.is_empty() {
            out.steps.push(expire(snap, plan.expired));
            continue;
        }
        let Some(command) = plan.command else {
            return out;
        };
        let launched = execute(snap, &command);
        out.steps.push(Step {
            method: command.method.as_str().into(),
            reason: command.reason.as_str().into(),
            removed: command.candidates,
            launched,
            savings: command.savings,
        });
    }
    out.cut_short = true;
    out
}

fn expire(snap: &mut DisruptionSnapshot, expired: Vec<String>) -> Step {
    for node in snap.nodes.iter_mut().filter(|n| expired.contains(&n.name)) {
        let pods = std::mem::take(&mut node.pods);
        snap.pending_pods.extend(
            pods.into_iter()
                .filter(|p| !p.daemon_set && !p.mirror)
                .map(|p| p.pod),
        );
    }
    snap.nodes.retain(|n| !expired.contains(&n.name));
    let plan = crate::schedule(&scheduling_view(snap));
    let launched = provision(snap, &plan);
    Step {
        method: "Expiration".into(),
        reason: "Expired".into(),
        removed: expired,
        launched,
        savings: 0.0,
    }
}

/// The provisioner's view of a disruption snapshot: nodes not being
/// deleted, and the pending pods.
pub fn scheduling_view(snap: &DisruptionSnapshot) -> Snapshot {
    Snapshot {
        node_pools: snap.node_pools.iter().map(|p| p.pool.clone()).collect(),
        nodes: snap
            .nodes
            .iter()
            .filter(|n| !n.deleting)
            .map(|n| Node {
                name: n.name.clone(),
                labels: n.labels.clone(),
                taints: n.taints.clone(),
                allocatable: n.allocatable.clone(),
                capacity: n.capacity.clone(),
                pods: n
                    .pods
                    .iter()
                    .map(|p| BoundPod {
                        namespace: p.pod.namespace.clone(),
                        name: p.pod.name.clone(),
                        template: p.pod.template.clone(),
                    })
                    .collect(),
                initialized: n.initialized,
                node_pool: n.node_pool.clone(),
                in_flight: n.in_flight,
                awaiting_launch: n.awaiting_launch,
            })
            .collect(),
        daemon_sets: snap.daemon_sets.clone(),
        pods: snap.pending_pods.clone(),
        options: snap.options.scheduling,
    }
}
