//! A live cluster's objects into the disruption engine's snapshot: every
//! Node with its NodeClaim and pods, NodeClaims still launching, the
//! NodePools' disruption settings, PDBs and the time.
//!
//! What Kubernetes does not record (when a node's pods last changed, when a
//! drift was first seen, the provider's drift verdicts, fresh nominations)
//! the controller keeps and passes in as [`Observed`].

use super::cluster::{
    Objects, controlled_by, in_flight, is_daemon_set_pod, is_provisionable, is_terminal,
};
use super::{nodes, pods};
use crate::crds::{NodeClaim, NodePool};
use crate::slim::{Node, Pod};
use anyhow::Context;
use engine::disruption::{
    Budget, ClusterNode, ConsolidationPolicy, DisruptionNodePool, DisruptionOptions,
    DisruptionReason, DisruptionSnapshot, NodePod, PodDisruptionBudget,
};
use k8s_openapi::api::policy::v1 as policy;
use kube::ResourceExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use vocabulary::labels;

/// What the controller has seen that the objects do not say.
#[derive(Debug, Default)]
pub struct Observed {
    /// Node (or in-flight NodeClaim) name to when its pods last changed.
    pub last_pod_event: BTreeMap<String, i64>,
    /// NodeClaim name to when it was first seen drifted.
    pub drifted_since: BTreeMap<String, i64>,
    /// NodeClaim name to the provider's drift reason.
    pub provider_drift: BTreeMap<String, String>,
    /// Node and NodeClaim names the provisioner just planned pods onto.
    pub nominated: BTreeSet<String>,
    /// Node and NodeClaim names that disruption commands under way hold.
    pub disrupting: BTreeSet<String>,
}

pub struct Inputs<'a> {
    pub objects: Objects<'a>,
    pub pdbs: &'a [Arc<policy::PodDisruptionBudget>],
    /// Each NodePool that can launch, with its scheduling view.
    pub pools: &'a [(Arc<NodePool>, engine::NodePool)],
    pub observed: &'a Observed,
    /// Unix seconds.
    pub now: i64,
    pub options: DisruptionOptions,
}

/// The snapshot, and the objects left out of it with why.
pub fn build(inputs: &Inputs) -> (DisruptionSnapshot, Vec<String>) {
    let objects = &inputs.objects;
    let mut skipped = Vec::new();
    let mut bound: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    let mut pending_pods = Vec::new();
    let mut converter = pods::Pods::default();
    for p in objects.pods {
        match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node) if !node.is_empty() && !is_terminal(p) => {
                bound.entry(node).or_default().push(p);
            }
            Some(node) if !node.is_empty() => {}
            _ if is_provisionable(p) => match converter.pod(p, creation_seconds(p)) {
                Ok(pod) => pending_pods.push(pod),
                Err(e) => skipped.push(format!("{e:#}")),
            },
            _ => {}
        }
    }
    let claims_by_provider_id: BTreeMap<&str, &NodeClaim> = objects
        .node_claims
        .iter()
        .filter_map(|c| Some((c.provider_id()?, c.as_ref())))
        .collect();
    let engine_pools: Vec<engine::NodePool> = inputs.pools.iter().map(|(_, p)| p.clone()).collect();
    let hashes: BTreeMap<String, String> = inputs
        .pools
        .iter()
        .map(|(np, _)| {
            (
                np.metadata.name.clone().unwrap_or_default(),
                crate::hash::node_pool_hash(np),
            )
        })
        .collect();

    let mut out = Vec::new();
    let mut registered = BTreeSet::new();
    for n in objects.nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let claim = n
            .provider_id()
            .and_then(|id| claims_by_provider_id.get(id).copied());
        if let Some(c) = claim {
            registered.insert(c.metadata.name.clone().unwrap_or_default());
        }
        let node_pods = bound
            .get(name.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        match cluster_node(n, claim, node_pods, inputs, &hashes, &mut converter) {
            Ok(node) => out.push(node),
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }
    for c in objects.node_claims {
        let name = c.metadata.name.clone().unwrap_or_default();
        if registered.contains(&name) {
            continue;
        }
        match in_flight(c, &engine_pools) {
            Ok(node) => {
                let mut cn = from_engine_node(node);
                claim_fields(&mut cn, c, inputs, &hashes);
                cn.deleting |= c.metadata.deletion_timestamp.is_some();
                out.push(cn);
            }
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }

    let mut daemon_sets = Vec::new();
    for ds in objects.daemon_sets {
        match pods::daemon_set(ds) {
            Ok(d) => daemon_sets.push(d),
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }
    let mut pdbs = Vec::new();
    for pdb in inputs.pdbs {
        match pdb_of(pdb) {
            Ok(p) => pdbs.push(p),
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }
    let snapshot = DisruptionSnapshot {
        now: inputs.now,
        node_pools: inputs
            .pools
            .iter()
            .map(|(np, pool)| node_pool(np, pool.clone()))
            .collect(),
        nodes: out,
        daemon_sets,
        pending_pods,
        pdbs,
        options: inputs.options,
    };
    (snapshot, skipped)
}

fn creation_seconds(p: &Pod) -> i64 {
    p.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or_default()
}

fn from_engine_node(n: engine::Node) -> ClusterNode {
    ClusterNode {
        name: n.name,
        node_pool: n.node_pool,
        labels: n.labels,
        taints: n.taints,
        allocatable: n.allocatable,
        capacity: n.capacity,
        in_flight: n.in_flight,
        awaiting_launch: n.awaiting_launch,
        initialized: n.initialized,
        ..ClusterNode::default()
    }
}

fn cluster_node(
    n: &Node,
    claim: Option<&NodeClaim>,
    bound: &[&Pod],
    inputs: &Inputs,
    hashes: &BTreeMap<String, String>,
    converter: &mut pods::Pods,
) -> anyhow::Result<ClusterNode> {
    let mut cn = from_engine_node(nodes::node(n, claim, &[], converter)?);
    let name = cn.name.clone();
    // Sized up front: collecting through `Result` cannot know the length,
    // and grown by doubling, a node's ten pods took room for sixteen of
    // these large records.
    cn.pods = Vec::with_capacity(bound.len());
    for p in bound {
        cn.pods
            .push(node_pod(p, converter).with_context(|| format!("node {name}"))?);
    }
    cn.not_ready = !n.is_ready();
    cn.deleting = n.metadata.deletion_timestamp.is_some()
        || cn
            .taints
            .iter()
            .any(|t| t.key == vocabulary::taints::DISRUPTED);
    cn.do_not_disrupt = n.annotations().get(labels::DO_NOT_DISRUPT).cloned();
    cn.created = n
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or(inputs.now);
    if let Some(c) = claim {
        claim_fields(&mut cn, c, inputs, hashes);
        cn.deleting |= c.metadata.deletion_timestamp.is_some();
    }
    cn.last_pod_event = inputs.observed.last_pod_event.get(&name).copied();
    cn.nominated |= inputs.observed.nominated.contains(&name);
    cn.deleting |= inputs.observed.disrupting.contains(&name);
    Ok(cn)
}

/// What comes from the NodeClaim: its age and lifetime, initialization, drift.
fn claim_fields(
    cn: &mut ClusterNode,
    c: &NodeClaim,
    inputs: &Inputs,
    hashes: &BTreeMap<String, String>,
) {
    let name = c.metadata.name.clone().unwrap_or_default();
    if let Some(t) = &c.metadata.creation_timestamp {
        cn.created = t.0.as_second();
    }
    cn.expire_after = c.spec.expire_after.clone();
    cn.initialized_at = c
        .condition(crate::crds::nodeclaim::conditions::INITIALIZED)
        .filter(|x| x.status == "True")
        .map(|x| x.last_transition_time.0.as_second());
    let annotations = c.metadata.annotations.clone().unwrap_or_default();
    let same_version = annotations
        .get(labels::NODE_POOL_HASH_VERSION)
        .map(String::as_str)
        == Some(crate::hash::VERSION);
    cn.node_pool_hash_drifted = same_version
        && c.node_pool()
            .and_then(|p| hashes.get(p))
            .is_some_and(|h| annotations.get(labels::NODE_POOL_HASH) != Some(h));
    cn.provider_drift = inputs.observed.provider_drift.get(&name).cloned();
    cn.drifted_since = inputs.observed.drifted_since.get(&name).copied();
    cn.nominated = inputs.observed.nominated.contains(&name);
    cn.deleting |= inputs.observed.disrupting.contains(&name);
}

fn node_pod(p: &Pod, converter: &mut pods::Pods) -> anyhow::Result<NodePod> {
    let annotations = p.annotations();
    let status = p.status.as_ref();
    Ok(NodePod {
        pod: converter.on_node(p, creation_seconds(p))?,
        do_not_disrupt: annotations.get(labels::DO_NOT_DISRUPT).cloned(),
        deletion_cost: annotations
            .get("controller.kubernetes.io/pod-deletion-cost")
            .cloned(),
        daemon_set: is_daemon_set_pod(p),
        mirror: annotations.contains_key(labels::MIRROR_POD),
        start_time: status
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_second()),
        not_ready: status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "False"),
        terminating: p.metadata.deletion_timestamp.is_some(),
        stateful_set: controlled_by(p, "StatefulSet"),
    })
}

fn pdb_of(pdb: &policy::PodDisruptionBudget) -> anyhow::Result<PodDisruptionBudget> {
    let name = pdb.metadata.name.clone().unwrap_or_default();
    let spec = pdb.spec.clone().unwrap_or_default();
    Ok(PodDisruptionBudget {
        namespace: pdb.metadata.namespace.clone().unwrap_or_default(),
        selector: spec
            .selector
            .as_ref()
            .map(pods::label_selector)
            .transpose()
            .with_context(|| format!("PodDisruptionBudget {name}"))?,
        disruptions_allowed: pdb
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0),
        always_allow_unhealthy: spec.unhealthy_pod_eviction_policy.as_deref()
            == Some("AlwaysAllow"),
        name,
    })
}

/// `spec.disruption` and `expireAfter` of a NodePool, with Karpenter's defaults.
pub fn node_pool(np: &NodePool, pool: engine::NodePool) -> DisruptionNodePool {
    let defaults = DisruptionNodePool::default();
    let d = np.spec.disruption.clone().unwrap_or_default();
    DisruptionNodePool {
        pool,
        consolidation_policy: match d.consolidation_policy.as_deref() {
            Some("WhenEmpty") => ConsolidationPolicy::WhenEmpty,
            Some("Balanced") => ConsolidationPolicy::Balanced,
            _ => ConsolidationPolicy::WhenEmptyOrUnderutilized,
        },
        consolidate_after: d.consolidate_after.unwrap_or(defaults.consolidate_after),
        budgets: budgets(np),
        expire_after: np
            .spec
            .template
            .spec
            .expire_after
            .clone()
            .unwrap_or(defaults.expire_after),
        consolidation_threshold: defaults.consolidation_threshold,
    }
}

/// `spec.disruption.budgets`, with Karpenter's default.
pub fn budgets(np: &NodePool) -> Vec<Budget> {
    match np.spec.disruption.as_ref().and_then(|d| d.budgets.as_ref()) {
        Some(b) => b.iter().filter_map(budget).collect(),
        None => DisruptionNodePool::default().budgets,
    }
}

/// A budget as the engine reads it; `None` for one that names only reasons
/// it does not know, which would otherwise read as a budget for every
/// reason.
fn budget(b: &crate::crds::nodepool::Budget) -> Option<Budget> {
    let named = b.reasons.as_ref().is_some_and(|r| !r.is_empty());
    let reasons: Vec<DisruptionReason> = b
        .reasons
        .iter()
        .flatten()
        .filter_map(|r| match r.as_str() {
            "Underutilized" => Some(DisruptionReason::Underutilized),
            "Empty" => Some(DisruptionReason::Empty),
            "Drifted" => Some(DisruptionReason::Drifted),
            "Unhealthy" => Some(DisruptionReason::Unhealthy),
            _ => None,
        })
        .collect();
    if named && reasons.is_empty() {
        return None;
    }
    Some(Budget {
        nodes: b.nodes.clone(),
        schedule: b.schedule.clone(),
        duration: b.duration.clone(),
        reasons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crds::nodepool::Budget as ApiBudget;

    fn api(nodes: &str, reasons: Option<&[&str]>) -> ApiBudget {
        ApiBudget {
            nodes: nodes.into(),
            reasons: reasons.map(|r| r.iter().map(|s| s.to_string()).collect()),
            ..ApiBudget::default()
        }
    }

    #[test]
    fn a_budget_for_node_repair_alone_does_not_hold_back_every_reason() {
        let repair = budget(&api("0", Some(&["Unhealthy"]))).expect("a repair budget");
        assert_eq!(repair.reasons, [DisruptionReason::Unhealthy]);
        let drift = budget(&api("1", Some(&["Drifted", "Unhealthy"]))).expect("a drift budget");
        assert_eq!(
            drift.reasons,
            [DisruptionReason::Drifted, DisruptionReason::Unhealthy]
        );
        assert!(budget(&api("0", Some(&["SomethingNew"]))).is_none());
        let all = budget(&api("10%", None)).expect("every reason");
        assert!(all.reasons.is_empty());
    }
}
