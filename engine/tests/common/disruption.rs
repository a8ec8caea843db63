//! Builders for disruption snapshots: managed nodes of the D-series catalogue
//! with pods bound to them.

use engine::disruption::*;
use engine::*;
use vocabulary::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, OS, ZONE};

use super::{GI, d_series, labels, pod, pool};

/// 2024-05-15 12:00 UTC, a Wednesday; nodes are created a day earlier.
pub const NOW: i64 = 1_715_774_400;
pub const DAY: i64 = 86_400;

/// A NodePool over `types` with consolidation right away and no budget limit.
pub fn dpool(name: &str, types: Vec<InstanceType>) -> DisruptionNodePool {
    DisruptionNodePool {
        pool: pool(name, types),
        budgets: Vec::new(),
        ..DisruptionNodePool::default()
    }
}

pub fn dsnapshot(pools: Vec<DisruptionNodePool>, nodes: Vec<ClusterNode>) -> DisruptionSnapshot {
    DisruptionSnapshot {
        now: NOW,
        node_pools: pools,
        nodes,
        ..DisruptionSnapshot::default()
    }
}

/// An initialized node of pool `pool`, instance type `ty` (looked up in the
/// D series for its size), in `zone` with capacity type `ct`.
pub fn managed(name: &str, pool: &str, ty: &str, zone: &str, ct: &str) -> ClusterNode {
    let t = d_series()
        .into_iter()
        .find(|t| t.name == ty)
        .unwrap_or_else(|| super::it(ty, 4, 16, 0.2));
    managed_as(name, pool, &t, zone, ct)
}

/// An initialized node of pool `pool` and instance type `t`, its
/// allocatable what `t` leaves after its overhead.
pub fn managed_as(name: &str, pool: &str, t: &InstanceType, zone: &str, ct: &str) -> ClusterNode {
    ClusterNode {
        name: name.into(),
        node_pool: Some(pool.into()),
        labels: labels(&[
            (INSTANCE_TYPE, &t.name),
            (ZONE, zone),
            (CAPACITY_TYPE, ct),
            (HOSTNAME, name),
            (NODE_POOL, pool),
            (ARCH, "amd64"),
            (OS, "linux"),
        ]),
        allocatable: t.allocatable(),
        initialized: true,
        created: NOW - DAY,
        ..ClusterNode::default()
    }
}

/// A plain pod bound to a node.
pub fn bound_pod(name: &str, cpu_milli: i64) -> NodePod {
    NodePod {
        pod: pod(name, cpu_milli, GI / 4),
        start_time: Some(NOW - DAY),
        ..NodePod::default()
    }
}

pub fn with_pods(mut n: ClusterNode, pods: Vec<NodePod>) -> ClusterNode {
    n.pods = pods;
    n
}

/// `count` pods of `cpu_milli` each named `<node>-<i>`.
pub fn filled(n: ClusterNode, count: usize, cpu_milli: i64) -> ClusterNode {
    let name = n.name.clone();
    let pods = (0..count)
        .map(|i| bound_pod(&format!("{name}-{i}"), cpu_milli))
        .collect();
    with_pods(n, pods)
}

pub fn command(plan: &DisruptionPlan) -> &Command {
    plan.command
        .as_ref()
        .unwrap_or_else(|| panic!("no command: {plan:#?}"))
}

pub fn reasons<'a>(plan: &'a DisruptionPlan, node: &str) -> Vec<&'a str> {
    plan.kept
        .iter()
        .find(|k| k.name == node)
        .unwrap_or_else(|| panic!("{node} is not kept: {plan:#?}"))
        .reasons
        .iter()
        .map(|r| r.message.as_str())
        .collect()
}

pub fn kinds(plan: &DisruptionPlan, node: &str) -> Vec<KeepKind> {
    plan.kept
        .iter()
        .find(|k| k.name == node)
        .map(|k| k.reasons.iter().map(|r| r.kind).collect())
        .unwrap_or_default()
}

/// The price of a D-series type for a capacity type (spot is 70%).
pub fn d_price(ty: &str, ct: &str) -> f64 {
    let t = d_series().into_iter().find(|t| t.name == ty).unwrap();
    t.offerings
        .iter()
        .find(|o| o.capacity_type == ct)
        .map(|o| o.price)
        .unwrap()
}
