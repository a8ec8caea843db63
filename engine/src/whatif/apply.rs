//! Carrying out one plan or one command on a snapshot.

use crate::disruption::{ClusterNode, Command, DisruptionSnapshot, NodePod};
use crate::plan::{NewNodeClaim, Plan, PodRef, Target};
use crate::snapshot::{InstanceType, Operator, Pod};
use std::collections::BTreeMap;
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODE_POOL, ZONE};

/// The nodes a plan launched, by name, in the plan's order.
pub type Launched = Vec<String>;

/// Launches the provisioner's plan: each new NodeClaim becomes a node on its
/// cheapest offering, and each pending pod moves where the plan placed it.
/// Pods the plan could not place stay pending.
pub fn provision(snap: &mut DisruptionSnapshot, plan: &Plan) -> Launched {
    let mut pending: BTreeMap<Key, Pod> = std::mem::take(&mut snap.pending_pods)
        .into_iter()
        .map(|p| (pod_ref(&p), p))
        .collect();
    let launched = place(snap, plan, &mut pending);
    snap.pending_pods = pending.into_values().collect();
    launched
}

/// Executes a disruption command: its replacements launch, the candidates'
/// pods move where its simulation placed them (pods it could not place
/// become pending; DaemonSet and mirror pods go with their node), and the
/// candidates are gone.
pub fn execute(snap: &mut DisruptionSnapshot, command: &Command) -> Launched {
    let mut evicted = BTreeMap::new();
    snap.nodes.retain_mut(|n| {
        if !command.candidates.contains(&n.name) {
            return true;
        }
        for p in n.pods.drain(..).filter(|p| !p.daemon_set && !p.mirror) {
            evicted.insert(pod_ref(&p.pod), p.pod);
        }
        false
    });
    let launched = place(snap, &command.replacements, &mut evicted);
    snap.pending_pods.extend(evicted.into_values());
    launched
}

/// Launches `plan`'s NodeClaims and moves the pods it placed out of `pods`.
fn place(snap: &mut DisruptionSnapshot, plan: &Plan, pods: &mut BTreeMap<Key, Pod>) -> Launched {
    let mut launched = Vec::new();
    let mut claim_node = Vec::with_capacity(plan.new_node_claims.len());
    for claim in &plan.new_node_claims {
        match launch(snap, plan, claim) {
            Some(node) => {
                claim_node.push(Some(snap.nodes.len()));
                launched.push(node.name.clone());
                snap.nodes.push(node);
            }
            None => claim_node.push(None),
        }
    }
    let by_name: BTreeMap<String, usize> = snap
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    for placement in &plan.placements {
        let node = match &placement.target {
            Target::ExistingNode(name) => by_name.get(name).copied(),
            Target::NewNodeClaim(i) => claim_node.get(*i).copied().flatten(),
        };
        let (Some(node), Some(pod)) = (node, pods.remove(&key_of(&placement.pod))) else {
            continue;
        };
        snap.nodes[node].pods.push(NodePod {
            start_time: Some(snap.now),
            pod,
            ..NodePod::default()
        });
    }
    launched
}

/// The node a planned NodeClaim becomes: its cheapest offering's instance
/// type, zone and capacity type; the single-valued requirements of the
/// claim and of the type as labels; the type's capacity less its overhead.
fn launch(snap: &DisruptionSnapshot, plan: &Plan, claim: &NewNodeClaim) -> Option<ClusterNode> {
    let cheapest = claim.cheapest.as_ref()?;
    let pool = snap
        .node_pools
        .iter()
        .find(|p| p.pool.name == claim.node_pool)?;
    let ty: &InstanceType = pool
        .pool
        .instance_types
        .iter()
        .find(|t| t.name == cheapest.instance_type)?;
    let mut labels = pool.pool.labels.clone();
    for r in plan
        .node_claim_requirements(claim)
        .iter()
        .chain(&ty.requirements)
        .filter(|r| r.operator == Operator::In && r.values.len() == 1)
    {
        labels.insert(r.key.clone(), r.values[0].clone());
    }
    labels.insert(INSTANCE_TYPE.into(), ty.name.clone());
    labels.insert(CAPACITY_TYPE.into(), cheapest.capacity_type.clone());
    if let Some(zone) = &cheapest.zone {
        labels.insert(ZONE.into(), zone.clone());
    }
    labels.insert(NODE_POOL.into(), claim.node_pool.clone());
    let allocatable = ty.allocatable();
    let taken = snap
        .nodes
        .iter()
        .filter(|n| n.node_pool.as_deref() == Some(claim.node_pool.as_str()))
        .count();
    let name = (taken + 1..)
        .map(|i| format!("{}-new-{i}", claim.node_pool))
        .find(|n| !snap.nodes.iter().any(|x| &x.name == n))?;
    Some(ClusterNode {
        name,
        node_pool: Some(claim.node_pool.clone()),
        labels,
        taints: pool.pool.taints.clone(),
        allocatable,
        capacity: Some(ty.capacity.clone()),
        initialized: true,
        created: snap.now,
        initialized_at: Some(snap.now),
        ..ClusterNode::default()
    })
}

/// Namespace and name: a bound pod's uid may be empty.
type Key = (String, String);

fn pod_ref(p: &Pod) -> Key {
    (p.namespace.clone(), p.name.clone())
}

fn key_of(p: &PodRef) -> Key {
    (p.namespace.clone(), p.name.clone())
}
