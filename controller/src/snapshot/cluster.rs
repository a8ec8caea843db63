//! A live cluster's objects into the engine: nodes with the pods bound to
//! them, NodeClaims still on their way to becoming nodes, and the pods the
//! provisioner must find room for.

use super::{nodes, pods};
use crate::crds::NodeClaim;
use crate::slim::Node;
use crate::slim::Pod;
use engine::ResourceList;
use k8s_openapi::api::apps::v1::DaemonSet;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use vocabulary::labels;

/// What the watchers hold, as plain slices.
pub struct Objects<'a> {
    pub pods: &'a [Arc<Pod>],
    pub nodes: &'a [Arc<Node>],
    pub node_claims: &'a [Arc<NodeClaim>],
    pub daemon_sets: &'a [Arc<DaemonSet>],
}

/// The cluster side of an engine snapshot.
pub struct Converted {
    pub nodes: Vec<engine::Node>,
    pub pods: Vec<engine::Pod>,
    pub daemon_sets: Vec<engine::DaemonSet>,
    /// Objects that could not be converted, with why; the rest still plan.
    pub skipped: Vec<String>,
}

/// Karpenter's provisionable pod: the scheduler found no node for it, it is
/// not a DaemonSet pod, not finished, not being deleted and not preempting.
pub fn is_provisionable(p: &Pod) -> bool {
    let Some(spec) = &p.spec else { return false };
    let status = p.status.as_ref();
    spec.node_name.as_deref().unwrap_or_default().is_empty()
        && p.metadata.deletion_timestamp.is_none()
        && !is_terminal(p)
        && !is_daemon_set_pod(p)
        && status
            .and_then(|s| s.nominated_node_name.as_deref())
            .unwrap_or_default()
            .is_empty()
        && status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
}

pub fn is_terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

pub fn is_daemon_set_pod(p: &Pod) -> bool {
    controlled_by(p, "DaemonSet")
}

/// Whether the pod's controller is of `kind`.
pub fn controlled_by(p: &Pod, kind: &str) -> bool {
    p.owner_references()
        .iter()
        .any(|o| o.kind == kind && o.controller == Some(true))
}

fn creation_millis(p: &Pod) -> i64 {
    p.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or_default()
}

/// Converts the objects; `pools` supply instance types to size NodeClaims
/// that have not launched yet.
pub fn build(objects: &Objects, pools: &[engine::NodePool]) -> Converted {
    let mut skipped = Vec::new();
    let mut bound: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    let mut pending = Vec::new();
    for p in objects.pods {
        match p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            Some(node) if !node.is_empty() && !is_terminal(p) => {
                bound.entry(node).or_default().push(p);
            }
            Some(node) if !node.is_empty() => {}
            _ if is_provisionable(p) => pending.push(p),
            _ => {}
        }
    }

    let claims: BTreeMap<&str, &NodeClaim> = objects
        .node_claims
        .iter()
        .filter_map(|c| Some((c.provider_id()?, c.as_ref())))
        .collect();
    let mut out_nodes = Vec::new();
    let mut provider_ids = BTreeSet::new();
    let mut converter = pods::Pods::default();
    for n in objects.nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let provider_id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        if let Some(id) = provider_id {
            provider_ids.insert(id);
        }
        if n.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pods = bound.get(name).map(Vec::as_slice).unwrap_or_default();
        let claim = provider_id.and_then(|id| claims.get(id).copied());
        match nodes::node(n, claim, pods, &mut converter) {
            Ok(node) => out_nodes.push(node),
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }
    for c in objects.node_claims {
        let registered = c.provider_id().is_some_and(|id| provider_ids.contains(id));
        if registered || c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match in_flight(c, pools) {
            Ok(node) => out_nodes.push(node),
            Err(e) => skipped.push(format!("{e:#}")),
        }
    }

    let mut out_pods = Vec::with_capacity(pending.len());
    for p in pending {
        match converter.pod(p, creation_millis(p)) {
            Ok(pod) => out_pods.push(pod),
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
    Converted {
        nodes: out_nodes,
        pods: out_pods,
        daemon_sets,
        skipped,
    }
}

/// A NodeClaim without its Node yet, as a node the scheduler may fill. Before
/// launch its size is unknown: it counts as the smallest of its instance
/// types (so pods planned onto it still fit whatever launches) and against
/// limits as the largest.
pub fn in_flight(c: &NodeClaim, pools: &[engine::NodePool]) -> anyhow::Result<engine::Node> {
    let name = c.metadata.name.clone().unwrap_or_default();
    let node_labels = nodes::claim_labels(c);
    let node_pool = c.node_pool().map(str::to_string);
    let status = c.status.as_ref();
    let (allocatable, capacity) = match status.filter(|s| !s.allocatable.is_empty()) {
        Some(s) => (
            super::resource_list(Some(&s.allocatable))?,
            Some(super::resource_list(Some(&s.capacity))?),
        ),
        None => estimate(c, node_pool.as_deref(), pools),
    };
    Ok(engine::Node {
        name,
        labels: node_labels,
        taints: c
            .spec
            .taints
            .iter()
            .map(nodes::taint)
            .collect::<anyhow::Result<_>>()?,
        allocatable,
        capacity,
        pods: Vec::new(),
        initialized: false,
        node_pool,
        in_flight: true,
        awaiting_launch: c.provider_id().is_none(),
    })
}

fn estimate(
    c: &NodeClaim,
    pool: Option<&str>,
    pools: &[engine::NodePool],
) -> (ResourceList, Option<ResourceList>) {
    let names: BTreeSet<&str> = c
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == labels::INSTANCE_TYPE && r.operator == "In")
        .flat_map(|r| r.values.iter().map(String::as_str))
        .collect();
    let types = pools
        .iter()
        .filter(|p| Some(p.name.as_str()) == pool)
        .flat_map(|p| p.instance_types.iter())
        .filter(|t| names.contains(t.name.as_str()));
    let mut smallest: Option<ResourceList> = None;
    let mut largest = ResourceList::new();
    for t in types {
        let alloc = t.allocatable();
        smallest = Some(match smallest {
            None => alloc,
            Some(s) => s
                .iter()
                .map(|(k, v)| (k.clone(), (*v).min(alloc.get(k).copied().unwrap_or(0))))
                .collect(),
        });
        super::max_into(&mut largest, &t.capacity);
    }
    // With no known type (its pool is gone), it holds nothing and counts nothing.
    (smallest.unwrap_or_default(), Some(largest))
}
