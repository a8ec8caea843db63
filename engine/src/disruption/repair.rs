//! Node repair (Karpenter's NodeRepair feature gate): a node whose condition
//! has matched one of its provider's repair policies for at least the
//! policy's toleration is replaced. Never while more of its NodePool than
//! a fifth, rounded up, matches a policy at all: then the trouble is not the
//! nodes, and replacing them all at once would make it worse. Rounding up
//! lets a pool of one to five nodes repair one, as Karpenter does.
//!
//! Repairs are paced by the NodePool's disruption budgets for the
//! `Unhealthy` reason, as Karpenter's are: only initialized nodes count,
//! nodes already going take from it, NotReady ones do not (they are what
//! repair is for), and a node that never initialized is repaired whatever
//! the budget. The longest overdue go first.
//!
//! Separate from [`super::disrupt`]: no simulation (the node is broken
//! either way), and its input is the nodes' conditions, not their pods.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::budgets::allowed;
use super::snapshot::{Budget, DisruptionReason};

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
    /// Only initialized nodes count in, and take from, the budgets.
    pub initialized: bool,
}

/// The nodes to replace, and the NodePools repair leaves alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairPlan {
    /// (NodePool, node), sorted.
    pub repair: Vec<(String, String)>,
    /// NodePools with too many unhealthy nodes to repair any, sorted.
    pub held_back: Vec<HeldBack>,
    /// (NodePool, node) due for repair but past the NodePool's `Unhealthy`
    /// budget this time, sorted.
    pub over_budget: Vec<(String, String)>,
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
    /// With how long each is overdue.
    due: Vec<(i64, &'a RepairNode)>,
    initialized: i64,
    initialized_going: i64,
}

/// Which nodes to replace at `now` (Unix seconds), with each NodePool's
/// disruption budgets (a NodePool without an entry has no budget).
pub fn repair(
    now: i64,
    nodes: &[RepairNode],
    budgets: &BTreeMap<String, Vec<Budget>>,
) -> RepairPlan {
    let mut pools: BTreeMap<&str, Pool> = Default::default();
    for node in nodes {
        let pool = pools.entry(node.node_pool.as_str()).or_default();
        pool.nodes += 1;
        if node.initialized {
            pool.initialized += 1;
            if node.deleting {
                pool.initialized_going += 1;
            }
        }
        match health(node, now) {
            Health::Healthy => {}
            Health::Unhealthy => pool.unhealthy += 1,
            Health::Due(overdue) => {
                pool.unhealthy += 1;
                pool.due.push((overdue, node));
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
        let mut left = match budgets.get(name) {
            // Fails closed, as Karpenter does, on a budget it cannot read.
            Some(b) => {
                allowed(b, pool.initialized, DisruptionReason::Unhealthy, now).unwrap_or(0)
                    - pool.initialized_going
            }
            None => i64::MAX,
        };
        let mut due = pool.due;
        due.sort_by(|(a, x), (b, y)| b.cmp(a).then_with(|| x.name.cmp(&y.name)));
        for (_, n) in due.into_iter().filter(|(_, n)| !n.deleting) {
            let entry = (name.to_string(), n.name.clone());
            if !n.initialized {
                plan.repair.push(entry);
            } else if left > 0 {
                left -= 1;
                plan.repair.push(entry);
            } else {
                plan.over_budget.push(entry);
            }
        }
    }
    plan.repair.sort();
    plan.over_budget.sort();
    plan
}

enum Health {
    Healthy,
    /// A condition matches a policy, not yet for as long as it tolerates.
    Unhealthy,
    /// A condition has matched a policy for as long as it tolerates, and
    /// this many seconds more.
    Due(i64),
}

fn health(node: &RepairNode, now: i64) -> Health {
    let mut health = Health::Healthy;
    for c in &node.conditions {
        for p in &node.policies {
            if c.condition_type != p.condition_type || c.status != p.status {
                continue;
            }
            let overdue = now.saturating_sub(c.since.unwrap_or(now)) - p.toleration_seconds;
            if overdue >= 0 {
                return Health::Due(overdue);
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
            initialized: true,
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
        assert!(repair(1_599, &nodes, &BTreeMap::new()).repair.is_empty());
        assert_eq!(
            repair(1_600, &nodes, &BTreeMap::new()).repair,
            vec![("a".to_string(), "sick".to_string())]
        );
    }

    #[test]
    fn only_the_policys_status_counts() {
        let mut nodes = healthy("a", 9);
        nodes.push(node("a", "unknown", "Unknown", 0));
        assert!(repair(10_000, &nodes, &BTreeMap::new()).repair.is_empty());
    }

    #[test]
    fn a_condition_without_a_transition_time_has_only_just_started() {
        let mut nodes = healthy("a", 9);
        let mut sick = node("a", "sick", "False", 0);
        sick.conditions[0].since = None;
        nodes.push(sick);
        assert!(repair(10_000, &nodes, &BTreeMap::new()).repair.is_empty());
    }

    #[test]
    fn a_fifth_of_the_pool_rounded_up_is_repaired_more_is_held_back() {
        let mut nodes = vec![node("a", "sick-1", "False", 0)];
        assert_eq!(
            repair(10_000, &nodes, &BTreeMap::new()).repair.len(),
            1,
            "1 of 1"
        );
        nodes.extend(healthy("a", 5));
        nodes.push(node("a", "sick-2", "False", 0));
        assert_eq!(
            repair(10_000, &nodes, &BTreeMap::new()).repair.len(),
            2,
            "2 of 7"
        );
        nodes.push(node("a", "sick-3", "False", 0));
        let plan = repair(10_000, &nodes, &BTreeMap::new());
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
        let plan = repair(10_000, &nodes, &BTreeMap::new());
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
        let plan = repair(10_000, &nodes, &BTreeMap::new());
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
            repair(10_000, &nodes, &BTreeMap::new()).repair,
            vec![("a".into(), "sick".into())]
        );
        nodes.push(node("a", "sicker", "False", 0));
        assert!(repair(10_000, &nodes, &BTreeMap::new()).repair.is_empty());
    }

    #[test]
    fn the_plan_does_not_depend_on_input_order() {
        let mut nodes = healthy("a", 20);
        nodes.extend(["z", "m", "b"].map(|n| node("a", n, "False", 0)));
        let forward = repair(10_000, &nodes, &BTreeMap::new());
        nodes.reverse();
        assert_eq!(forward, repair(10_000, &nodes, &BTreeMap::new()));
        assert_eq!(
            forward.repair,
            vec![
                ("a".into(), "b".into()),
                ("a".into(), "m".into()),
                ("a".into(), "z".into())
            ]
        );
    }

    fn one_at_a_time() -> BTreeMap<String, Vec<Budget>> {
        let one = Budget {
            nodes: "1".into(),
            reasons: vec![DisruptionReason::Unhealthy],
            ..Budget::default()
        };
        BTreeMap::from([("a".to_string(), vec![one])])
    }

    #[test]
    fn the_unhealthy_budget_paces_repairs_longest_overdue_first() {
        let mut nodes = healthy("a", 20);
        nodes.push(node("a", "older", "False", 0));
        nodes.push(node("a", "newer", "False", 5_000));
        let plan = repair(10_000, &nodes, &one_at_a_time());
        assert_eq!(plan.repair, vec![("a".into(), "older".into())]);
        assert_eq!(plan.over_budget, vec![("a".into(), "newer".into())]);
        // A budget for other reasons does not hold repair back.
        let mut drift_only = one_at_a_time();
        drift_only.get_mut("a").unwrap()[0].reasons = vec![DisruptionReason::Drifted];
        drift_only.get_mut("a").unwrap()[0].nodes = "0".into();
        assert_eq!(repair(10_000, &nodes, &drift_only).repair.len(), 2);
    }

    #[test]
    fn a_repair_under_way_takes_the_budget_and_notready_nodes_do_not() {
        let mut nodes = healthy("a", 20);
        let mut going = node("a", "going", "False", 0);
        going.deleting = true;
        nodes.push(going);
        nodes.push(node("a", "sick", "False", 0));
        let plan = repair(10_000, &nodes, &one_at_a_time());
        assert!(plan.repair.is_empty(), "{plan:?}");
        assert_eq!(plan.over_budget, vec![("a".into(), "sick".into())]);
        // Without the one going, the NotReady node itself does not use up
        // the budget that repairs it.
        nodes.retain(|n| n.name != "going");
        assert_eq!(repair(10_000, &nodes, &one_at_a_time()).repair.len(), 1);
    }

    #[test]
    fn a_node_that_never_initialized_is_repaired_whatever_the_budget() {
        let mut nodes = healthy("a", 20);
        nodes.push(node("a", "sick", "False", 0));
        let mut fresh = node("a", "fresh", "False", 0);
        fresh.initialized = false;
        nodes.push(fresh);
        let plan = repair(10_000, &nodes, &one_at_a_time());
        assert_eq!(
            plan.repair,
            vec![("a".into(), "fresh".into()), ("a".into(), "sick".into())]
        );
    }
}
