//! Before and after: the nodes added and removed, the pods that moved, and
//! what each NodePool costs.

use crate::disruption::{ClusterNode, DisruptionNodePool, DisruptionSnapshot};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub added: Vec<NodeChange>,
    pub removed: Vec<NodeChange>,
    /// Pods bound before that are bound to another node after.
    pub pods_moved: usize,
    /// Pods pending before that are bound after.
    pub pods_placed: usize,
    pub pods_pending_before: usize,
    pub pods_pending_after: usize,
    /// Managed NodePools and unmanaged nodes (`node_pool: None`), by name.
    pub pools: Vec<PoolCost>,
    /// $/hour of every priced node.
    pub price_before: f64,
    pub price_after: f64,
}

impl Diff {
    /// Whether carrying out the decisions would change the cluster.
    pub fn changes(&self) -> bool {
        !self.added.is_empty() || !self.removed.is_empty() || self.pods_moved > 0
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeChange {
    pub name: String,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// $/hour; `None` when its NodePool's catalog has no such offering.
    pub price: Option<f64>,
    /// Pods bound to it, DaemonSet pods included.
    pub pods: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolCost {
    pub node_pool: Option<String>,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub price_before: f64,
    pub price_after: f64,
}

pub fn diff(before: &DisruptionSnapshot, after: &DisruptionSnapshot) -> Diff {
    let names = |s: &DisruptionSnapshot| -> BTreeSet<String> {
        s.nodes.iter().map(|n| n.name.clone()).collect()
    };
    let (was, is) = (names(before), names(after));
    let change = |s: &DisruptionSnapshot, n: &ClusterNode| NodeChange {
        name: n.name.clone(),
        node_pool: n.node_pool.clone(),
        instance_type: n.labels.get(INSTANCE_TYPE).cloned(),
        zone: n.labels.get(ZONE).cloned(),
        capacity_type: n.labels.get(CAPACITY_TYPE).cloned(),
        price: node_price(&s.node_pools, n),
        pods: n.pods.len(),
    };
    let bound = |s: &DisruptionSnapshot| -> BTreeMap<(String, String), String> {
        s.nodes
            .iter()
            .flat_map(|n| {
                n.pods.iter().map(|p| {
                    (
                        (p.pod.namespace.clone(), p.pod.name.clone()),
                        n.name.clone(),
                    )
                })
            })
            .collect()
    };
    let (bound_before, bound_after) = (bound(before), bound(after));
    let pending_before: BTreeSet<(String, String)> = before
        .pending_pods
        .iter()
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    let mut pools: BTreeMap<Option<String>, PoolCost> = BTreeMap::new();
    for (s, is_before) in [(before, true), (after, false)] {
        for n in &s.nodes {
            let cost = pools
                .entry(n.node_pool.clone())
                .or_insert_with(|| PoolCost {
                    node_pool: n.node_pool.clone(),
                    ..PoolCost::default()
                });
            let price = node_price(&s.node_pools, n).unwrap_or(0.0);
            if is_before {
                cost.nodes_before += 1;
                cost.price_before += price;
            } else {
                cost.nodes_after += 1;
                cost.price_after += price;
            }
        }
    }
    let pools: Vec<PoolCost> = pools.into_values().collect();
    Diff {
        added: after
            .nodes
            .iter()
            .filter(|n| !was.contains(&n.name))
            .map(|n| change(after, n))
            .collect(),
        removed: before
            .nodes
            .iter()
            .filter(|n| !is.contains(&n.name))
            .map(|n| change(before, n))
            .collect(),
        pods_moved: bound_before
            .iter()
            .filter(|(pod, node)| bound_after.get(*pod).is_some_and(|n| n != *node))
            .count(),
        pods_placed: pending_before
            .iter()
            .filter(|p| bound_after.contains_key(*p))
            .count(),
        pods_pending_before: before.pending_pods.len(),
        pods_pending_after: after.pending_pods.len(),
        price_before: pools.iter().map(|p| p.price_before).fold(0.0, |a, b| a + b),
        price_after: pools.iter().map(|p| p.price_after).fold(0.0, |a, b| a + b),
        pools,
    }
}

/// What a node costs by its NodePool's catalog, as disruption prices it:
/// the cheapest offering of its instance type in its zone and capacity type.
pub fn node_price(pools: &[DisruptionNodePool], node: &ClusterNode) -> Option<f64> {
    let pool = pools
        .iter()
        .find(|p| Some(&p.pool.name) == node.node_pool.as_ref())?;
    crate::disruption::node_price(&pool.pool, &node.labels).ok()
}
