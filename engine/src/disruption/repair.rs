//! Node repair (Karpenter's NodeRepair feature gate): a node whose condition
//! has matched one of its provider's repair policies for at least the
//! policy's toleration is replaced. Never while more of its NodePool than
//! a fifth, rounded up, matches a policy at all: then the trouble is not the
//! nodes, and replacing them all at once would make it worse. Rounding up
//! lets a pool of one to five nodes repair one, as Karpenter does.
//!
//! Separate from [`super::disrupt`]: repair is forceful (no budgets, no
//! simulation), and its input is the nodes' conditions, not their pods.

use serde::{Deserialize, Serialize};

/// A condition the provider asks to have repaired: `condition_type` at
/// `status` ("True", "False" or "Unknown") for `toleration_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairPolicy {
    pub condition_type: String,
    pub status: String,
    pub toleration_seconds: i64,
}

/// One condition of a Node, as its status reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCondition {
    pub condition_type: String,
    pub status: String,
    /// `lastTransitionTime`, Unix seconds; a condition without one has only
    /// just been seen.
    pub since: Option<i64>,
}

/// A managed node: its NodePool, its conditions and its provider's policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairNode {
    pub name: String,
    pub node_pool: String,
    pub conditions: Vec<NodeCondition>,
    pub policies: Vec<RepairPolicy>,
    /// Its NodeClaim is already being deleted: it still counts in its
    /// NodePool but is not repaired twice.
    pub deleting: bool,
}

/// The nodes to replace, and the NodePools repair leaves alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairPlan {
    /// (NodePool, node), sorted.
    pub repair: Vec<(String, String)>,
    /// NodePools with too many unhealthy nodes to repair any, sorted.
    pub held_back: Vec<HeldBack>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBack {
    pub node_pool: String,
    pub unhealthy: usize,
    pub nodes: usize,
}

/// The share of a NodePool that may be unhealthy, as a fraction 1/N.
const ALLOWED_UNHEALTHY_ONE_IN: usize = 5;

#[derive(Default)]
struct Pool<'a> {
    nodes: usize,
    unhealthy: usize,
    due: Vec<&'a RepairNode>,
}

/// Which nodes to replace at `now` (Unix seconds).
pub fn repair(now: i64, nodes: &[RepairNode]) -> RepairPlan {
    let mut pools: std::collections::BTreeMap<&str, Pool> = Default::default();
    for node in nodes {
        let pool = pools.entry(node.node_pool.as_str()).or_default();
        pool.nodes += 1;
        match health(node, now) {
            Health::Healthy => {}
            Health::Unhealthy => pool.unhealthy += 1,
            Health::Due => {
                pool.unhealthy += 1;
                pool.due.push(node);
            }
        }
    }
    let mut plan = RepairPlan::default();
    for (name, pool) in pools {
        if pool.due.is_empty() {
            continue;
        }
        if pool.unhealthy > pool.nodes.div_ceil(ALLOWED_UNHEALTHY_ONE_IN) {
            plan.held_back.push(HeldBack {
                node_pool: name.to_string(),
                unhealthy: pool.unhealthy,
                nodes: pool.nodes,
            });
            continue;
        }
        plan.repair.extend(
            pool.due
                .iter()
                .filter(|n| !n.deleting)
                .map(|n| (name.to_string(), n.name.clone())),
        );
    }
    plan.repair.sort();
    plan
}

enum Health {
    Healthy,
    /// A condition matches a policy, not yet for as long as it tolerates.
    Unhealthy,
    /// A condition has matched a policy for as long as it tolerates.
    Due,
}

fn health(node: &RepairNode, now: i64) -> Health {
    let mut health = Health::Healthy;
    for c in &node.conditions {
        for p in &node.policies {
            if c.condition_type != p.condition_type || c.status != p.status {
                continue;
            }
            if now.saturating_sub(c.since.unwrap_or(now)) >= p.toleration_seconds {
                return Health::Due;
            }
            health = Health::Unhealthy;
        }
    }
    health
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RepairPolicy {
        RepairPolicy {
            condition_type: "Ready".into(),
            status: "False".into(),
            toleration_seconds: 600,
        }
    }

    fn node(pool: &str, name: &str, ready: &str, since: i64) -> RepairNode {
        RepairNode {
            name: name.into(),
            node_pool: pool.into(),
            conditions: vec![NodeCondition {
                condition_type: "Ready".into(),
                status: ready.into(),
                since: Some(since),
            }],
            policies: vec![policy()],
            deleting: false,
        }
    }

    fn healthy(pool: &str, n: usize) -> Vec<RepairNode> {
        (0..n)
            .map(|i| node(pool, &format!("{pool}-ok-{i}"), "True", 0))
            .collect()
    }

    #[test]
    fn a_node_is_repaired_once_its_toleration_has_passed() {
        let mut nodes = healthy("a", 9);
        nodes.push(node("a", "sick", "False", 1_000));
        assert!(repair(1_599, &nodes).repair.is_empty());
        assert_eq!(
            repair(1_600, &nodes).repair,
            vec![("a".to_string(), "sick".to_string())]
        );
    }

    #[test]
    fn only_the_policys_status_counts() {
        let mut nodes = healthy("a", 9);
        nodes.push(node("a", "unknown", "Unknown", 0));
        assert!(repair(10_000, &nodes).repair.is_empty());
    }

    #[test]
    fn a_condition_without_a_transition_time_has_only_just_started() {
        let mut nodes = healthy("a", 9);
        let mut sick = node("a", "sick", "False", 0);
        sick.conditions[0].since = None;
        nodes.push(sick);
        assert!(repair(10_000, &nodes).repair.is_empty());
    }

    #[test]
    fn a_fifth_of_the_pool_rounded_up_is_repaired_more_is_held_back() {
        let mut nodes = vec![node("a", "sick-1", "False", 0)];
        assert_eq!(repair(10_000, &nodes).repair.len(), 1, "1 of 1");
        nodes.extend(healthy("a", 5));
        nodes.push(node("a", "sick-2", "False", 0));
        assert_eq!(repair(10_000, &nodes).repair.len(), 2, "2 of 7");
        nodes.push(node("a", "sick-3", "False", 0));
        let plan = repair(10_000, &nodes);
        assert!(plan.repair.is_empty(), "3 of 8");
        assert_eq!(
            plan.held_back,
            vec![HeldBack {
                node_pool: "a".into(),
                unhealthy: 3,
                nodes: 8
            }]
        );
    }

    #[test]
    fn a_node_within_its_toleration_still_counts_against_the_pool() {
        let mut nodes = healthy("a", 3);
        nodes.push(node("a", "due", "False", 0));
        nodes.push(node("a", "recent", "False", 9_999));
        let plan = repair(10_000, &nodes);
        assert!(plan.repair.is_empty());
        assert_eq!(plan.held_back[0].unhealthy, 2);
    }

    #[test]
    fn pools_are_judged_apart() {
        let mut nodes = healthy("big", 10);
        nodes.push(node("big", "big-sick", "False", 0));
        nodes.extend(healthy("small", 1));
        nodes.push(node("small", "small-sick-1", "False", 0));
        nodes.push(node("small", "small-sick-2", "False", 0));
        let plan = repair(10_000, &nodes);
        assert_eq!(plan.repair, vec![("big".into(), "big-sick".into())]);
        assert_eq!(plan.held_back[0].node_pool, "small");
    }

    #[test]
    fn a_deleting_node_counts_but_is_not_repaired_again() {
        let mut nodes = healthy("a", 7);
        let mut going = node("a", "going", "False", 0);
        going.deleting = true;
        nodes.push(going);
        nodes.push(node("a", "sick", "False", 0));
        assert_eq!(
            repair(10_000, &nodes).repair,
            vec![("a".into(), "sick".into())]
        );
        nodes.push(node("a", "sicker", "False", 0));
        assert!(repair(10_000, &nodes).repair.is_empty());
    }

    #[test]
    fn the_plan_does_not_depend_on_input_order() {
        let mut nodes = healthy("a", 20);
        nodes.extend(["z", "m", "b"].map(|n| node("a", n, "False", 0)));
        let forward = repair(10_000, &nodes);
        nodes.reverse();
        assert_eq!(forward, repair(10_000, &nodes));
        assert_eq!(
            forward.repair,
            vec![
                ("a".into(), "b".into()),
                ("a".into(), "m".into()),
                ("a".into(), "z".into())
            ]
        );
    }
}
