//! The input in canonical order, with each NodePool's durations parsed once.
//!
//! Architecture Invariant: everything downstream iterates these sorted lists,
//! so the decision does not depend on the order of the input's collections.

use crate::snapshot::{DaemonSet, Pod};

use super::duration;
use super::snapshot::{
    ClusterNode, DisruptionNodePool, DisruptionOptions, DisruptionSnapshot, NodePod,
    PodDisruptionBudget,
};

pub(crate) struct Cluster<'s> {
    /// Unix seconds.
    pub(crate) now: i64,
    /// By name.
    pub(crate) pools: Vec<PoolView<'s>>,
    /// By name.
    pub(crate) nodes: Vec<NodeView<'s>>,
    /// By namespace, name, uid.
    pub(crate) pending: Vec<&'s Pod>,
    pub(crate) daemon_sets: Vec<&'s DaemonSet>,
    /// By namespace, name.
    pub(crate) pdbs: Vec<&'s PodDisruptionBudget>,
    pub(crate) options: DisruptionOptions,
}

pub(crate) struct PoolView<'s> {
    pub(crate) spec: &'s DisruptionNodePool,
    /// Milliseconds; `Ok(None)` is "Never".
    pub(crate) consolidate_after: Result<Option<i64>, String>,
    /// Milliseconds; `None` is "Never" (or unreadable: a node is never
    /// expired by mistake).
    pub(crate) expire_after: Option<i64>,
}

impl PoolView<'_> {
    pub(crate) fn name(&self) -> &str {
        &self.spec.pool.name
    }
}

pub(crate) struct NodeView<'s> {
    pub(crate) node: &'s ClusterNode,
    /// Index into [`Cluster::pools`] of a managed node whose pool exists.
    pub(crate) pool: Option<usize>,
    /// Milliseconds: the node's own `expireAfter`, else its pool's; `None`
    /// is "Never" (or unreadable: a node is never expired by mistake).
    pub(crate) expire_after: Option<i64>,
    /// By namespace, name, uid.
    pub(crate) pods: Vec<&'s NodePod>,
}

impl<'s> NodeView<'s> {
    pub(crate) fn name(&self) -> &'s str {
        &self.node.name
    }

    /// Pods that move when the node goes: not daemonset or mirror pods,
    /// nor pods being deleted but a StatefulSet's.
    pub(crate) fn reschedulable(&self) -> impl Iterator<Item = &'s NodePod> + '_ {
        self.pods
            .iter()
            .copied()
            .filter(|p| !p.daemon_set && !p.mirror && (!p.terminating || p.stateful_set))
    }

    /// Pods that can keep the node: any but those being deleted.
    pub(crate) fn active(&self) -> impl Iterator<Item = &'s NodePod> + '_ {
        self.pods.iter().copied().filter(|p| !p.terminating)
    }
}

fn pod_key(p: &Pod) -> (&str, &str, &str) {
    (&p.namespace, &p.name, &p.uid)
}

impl<'s> Cluster<'s> {
    pub(crate) fn new(s: &'s DisruptionSnapshot) -> Self {
        let mut pools: Vec<&DisruptionNodePool> = s.node_pools.iter().collect();
        pools.sort_by(|a, b| a.pool.name.cmp(&b.pool.name));
        pools.dedup_by(|a, b| a.pool.name == b.pool.name);
        let pools: Vec<PoolView> = pools
            .into_iter()
            .map(|spec| PoolView {
                spec,
                consolidate_after: duration::parse_or_never(&spec.consolidate_after),
                expire_after: lifetime(&spec.expire_after),
            })
            .collect();
        let mut nodes: Vec<&ClusterNode> = s.nodes.iter().collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let nodes = nodes
            .into_iter()
            .map(|node| {
                let pool = node
                    .node_pool
                    .as_deref()
                    .and_then(|name| pools.binary_search_by(|p| p.name().cmp(name)).ok());
                let mut pods: Vec<&NodePod> = node.pods.iter().collect();
                pods.sort_by(|a, b| pod_key(&a.pod).cmp(&pod_key(&b.pod)));
                // As Karpenter v1: the NodeClaim's value, fixed at creation
                // (a NodePool's new value drifts the node instead).
                let expire_after = match &node.expire_after {
                    Some(own) => lifetime(own),
                    None => pool.and_then(|i| pools[i].expire_after),
                };
                NodeView {
                    node,
                    pool,
                    expire_after,
                    pods,
                }
            })
            .collect();
        let mut pending: Vec<&Pod> = s.pending_pods.iter().collect();
        pending.sort_by(|a, b| pod_key(a).cmp(&pod_key(b)));
        let mut daemon_sets: Vec<&DaemonSet> = s.daemon_sets.iter().collect();
        daemon_sets.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut pdbs: Vec<&PodDisruptionBudget> = s.pdbs.iter().collect();
        pdbs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Cluster {
            now: s.now,
            pools,
            nodes,
            pending,
            daemon_sets,
            pdbs,
            options: s.options,
        }
    }

    /// `now` in milliseconds, for comparing with parsed durations.
    pub(crate) fn now_ms(&self) -> i64 {
        self.now.saturating_mul(1000)
    }
}

/// An `expireAfter` in milliseconds; `None` for "Never", zero or unreadable.
fn lifetime(expire_after: &str) -> Option<i64> {
    duration::parse_or_never(expire_after)
        .ok()
        .flatten()
        .filter(|d| *d > 0)
}

/// Seconds to milliseconds.
pub(crate) fn ms(seconds: i64) -> i64 {
    seconds.saturating_mul(1000)
}
