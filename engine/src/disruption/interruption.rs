//! Interruption: a node whose condition matches one of its provider's
//! interruption signals is being taken away by its cloud. It is replaced at
//! once, whatever the budgets or do-not-disrupt say (the cloud will not
//! wait), and its drain ends at the signal's notice after the condition
//! appeared, so its pods are gone before the instance is.
//!
//! Separate from [`super::repair`]: no toleration, no share of the NodePool
//! held back, no budget.

use serde::{Deserialize, Serialize};

use super::repair::NodeCondition;

/// A condition by which the cloud announces an interruption: `condition_type`
/// at `status`, with at least `notice_seconds` before the instance goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptionSignal {
    pub condition_type: String,
    pub status: String,
    pub notice_seconds: i64,
    pub reason: String,
}

/// A managed node: its conditions and its provider's signals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchedNode {
    pub name: String,
    pub conditions: Vec<NodeCondition>,
    pub signals: Vec<InterruptionSignal>,
    /// Its NodeClaim is already being deleted.
    pub deleting: bool,
}

/// A node to replace now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interrupted {
    pub node: String,
    /// The signal's reason.
    pub reason: String,
    /// The condition that matched, as `Type=Status`.
    pub condition: String,
    /// When the condition appeared, Unix seconds.
    pub since: i64,
    /// When the drain must be over: `since` plus the notice, Unix seconds.
    pub deadline: i64,
}

/// The interrupted nodes, the nearest deadline first (then by name). A
/// condition without a transition time counts from `now`.
pub fn interrupted(now: i64, nodes: &[WatchedNode]) -> Vec<Interrupted> {
    let mut out: Vec<Interrupted> = nodes
        .iter()
        .filter(|n| !n.deleting)
        .filter_map(|n| {
            n.signals
                .iter()
                .filter_map(|s| {
                    let c = n
                        .conditions
                        .iter()
                        .find(|c| c.condition_type == s.condition_type && c.status == s.status)?;
                    let since = c.since.unwrap_or(now);
                    Some(Interrupted {
                        node: n.name.clone(),
                        reason: s.reason.clone(),
                        condition: format!("{}={}", c.condition_type, c.status),
                        since,
                        deadline: since.saturating_add(s.notice_seconds.max(0)),
                    })
                })
                .min_by_key(|i| i.deadline)
        })
        .collect();
    out.sort_by(|a, b| a.deadline.cmp(&b.deadline).then(a.node.cmp(&b.node)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal() -> InterruptionSignal {
        InterruptionSignal {
            condition_type: "PreemptionScheduled".into(),
            status: "True".into(),
            notice_seconds: 30,
            reason: "SpotInterrupted".into(),
        }
    }

    fn node(name: &str, status: &str, since: Option<i64>) -> WatchedNode {
        WatchedNode {
            name: name.into(),
            conditions: vec![
                NodeCondition {
                    condition_type: "Ready".into(),
                    status: "True".into(),
                    since: Some(0),
                },
                NodeCondition {
                    condition_type: "PreemptionScheduled".into(),
                    status: status.into(),
                    since,
                },
            ],
            signals: vec![signal()],
            deleting: false,
        }
    }

    #[test]
    fn a_matching_condition_interrupts_with_its_deadline() {
        let got = interrupted(
            1_000,
            &[
                node("later", "True", Some(990)),
                node("calm", "False", Some(900)),
                node("sooner", "True", Some(980)),
                node("unstamped", "True", None),
            ],
        );
        let names: Vec<(&str, i64)> = got.iter().map(|i| (i.node.as_str(), i.deadline)).collect();
        assert_eq!(
            names,
            [("sooner", 1_010), ("later", 1_020), ("unstamped", 1_030)]
        );
        assert_eq!(got[0].reason, "SpotInterrupted");
        assert_eq!(got[0].condition, "PreemptionScheduled=True");
    }

    #[test]
    fn a_node_already_going_or_without_signals_is_left_alone() {
        let mut going = node("going", "True", Some(990));
        going.deleting = true;
        let mut silent = node("silent", "True", Some(990));
        silent.signals.clear();
        assert!(interrupted(1_000, &[going, silent]).is_empty());
    }

    #[test]
    fn the_answer_does_not_depend_on_input_order() {
        let nodes = vec![
            node("b", "True", Some(5)),
            node("a", "True", Some(5)),
            node("c", "True", Some(1)),
        ];
        let mut reversed = nodes.clone();
        reversed.reverse();
        assert_eq!(interrupted(10, &nodes), interrupted(10, &reversed));
    }
}
