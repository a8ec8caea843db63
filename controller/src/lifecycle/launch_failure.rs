//! What a failed create means for its NodeClaim, decided from the plugin's
//! error alone; `launch.rs` carries it out.

use crate::crds::NodeClaim;
use karpenter_runtime::wit;
use std::time::Duration;
use vocabulary::{Operator, labels};

#[derive(Debug)]
pub enum LaunchFailure {
    /// Out of capacity: these offerings are marked unavailable for a while
    /// and the NodeClaim is deleted, so the next batch chooses again.
    Unavailable { offerings: Vec<wit::OfferingRef> },
    /// The NodeClass cannot launch now: the NodeClaim is deleted.
    NodeClassNotReady { message: String },
    /// The NodeClaim stays, Launched=False for `reason`, and is tried again
    /// after `backoff`.
    Retry {
        reason: String,
        message: String,
        backoff: Backoff,
    },
}

/// The wait before a failed launch is tried again: `first` after the first
/// failure, doubling with each one after it, never above `most`. A fault
/// that passes in a second (a dropped connection, a throttled call) costs
/// a second, not the ceiling; one that needs someone to act waits it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub most: Duration,
}

impl Backoff {
    /// The same wait after every failure: for what needs someone to act.
    pub fn fixed(wait: Duration) -> Backoff {
        Backoff {
            first: wait,
            most: wait,
        }
    }

    /// The wait after `failures` consecutive failures (1 for the first).
    pub fn after(&self, failures: u32) -> Duration {
        let doubled = self
            .first
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16));
        doubled.min(self.most)
    }
}

impl LaunchFailure {
    /// The reason users act on: the create error's own, or the kind's.
    pub fn code(&self) -> &str {
        match self {
            LaunchFailure::Unavailable { .. } => "InsufficientCapacity",
            LaunchFailure::NodeClassNotReady { .. } => "NodeClassNotReady",
            LaunchFailure::Retry { reason, .. } => reason,
        }
    }

    /// The Warning event each pod the NodeClaim was made for gets: the
    /// NodeClaim and why it did not launch, and what happens next.
    pub fn pod_event(&self, node_claim: &str, message: &str) -> String {
        let next = match self {
            LaunchFailure::Unavailable { .. } => {
                "the offerings that failed are kept out for a while and its pods scheduled again"
            }
            LaunchFailure::NodeClassNotReady { .. } => {
                "nothing launches from its NodeClass until it is ready"
            }
            LaunchFailure::Retry { .. } => "the launch will be tried again",
        };
        format!(
            "NodeClaim {node_claim} failed to launch ({}), {next}: {message}",
            self.code()
        )
    }

    /// The Warning event the NodeClaim gets: (reason, message).
    pub fn event(&self, node_claim: &str, message: &str) -> (&'static str, String) {
        match self {
            LaunchFailure::Unavailable { .. } => (
                "InsufficientCapacityError",
                format!("NodeClaim {node_claim} event: {message}"),
            ),
            LaunchFailure::NodeClassNotReady { message } => (
                "NodeClassNotReady",
                format!("NodeClaim {node_claim} event: {message}"),
            ),
            LaunchFailure::Retry { .. } => ("LaunchFailed", message.to_string()),
        }
    }
}

/// `error` is the provider's typed error, if the call got that far;
/// `message` the whole error as text.
pub fn decide(nc: &NodeClaim, error: Option<&wit::Error>, message: &str) -> LaunchFailure {
    match error {
        Some(wit::Error::InsufficientCapacity(ic)) => LaunchFailure::Unavailable {
            // A provider that names no offering gets every offering the
            // NodeClaim allowed marked, or the next batch would ask for the
            // same thing at once.
            offerings: if ic.offerings.is_empty() {
                allowed_offerings(nc)
            } else {
                ic.offerings.clone()
            },
        },
        Some(wit::Error::NodeClassNotReady(m)) => {
            LaunchFailure::NodeClassNotReady { message: m.clone() }
        }
        Some(wit::Error::CreateError(c)) => LaunchFailure::Retry {
            reason: c.reason.clone(),
            message: c.message.clone(),
            backoff: if c.retryable {
                Backoff {
                    first: Duration::from_secs(1),
                    most: Duration::from_secs(10),
                }
            } else {
                Backoff::fixed(Duration::from_secs(60))
            },
        },
        _ => LaunchFailure::Retry {
            reason: "LaunchFailed".into(),
            message: message.to_string(),
            backoff: Backoff {
                first: Duration::from_secs(2),
                most: Duration::from_secs(15),
            },
        },
    }
}

/// Every (instance type, zone, capacity type) the NodeClaim's `In`
/// requirements allow.
pub fn allowed_offerings(nc: &NodeClaim) -> Vec<wit::OfferingRef> {
    let values = |key: &str| -> Vec<String> {
        nc.spec
            .requirements
            .iter()
            .find(|r| r.key == key && r.operator == Operator::In.as_str())
            .map(|r| r.values.clone())
            .unwrap_or_default()
    };
    let (types, zones, capacity_types) = (
        values(labels::INSTANCE_TYPE),
        values(labels::ZONE),
        values(labels::CAPACITY_TYPE),
    );
    let mut out = Vec::new();
    for t in &types {
        for z in &zones {
            for c in &capacity_types {
                out.push(wit::OfferingRef {
                    instance_type: t.clone(),
                    zone: z.clone(),
                    capacity_type: c.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-x"},
            "spec": {
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["a", "b"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                ],
            },
        }))
        .expect("a NodeClaim")
    }

    fn offering(t: &str, z: &str, c: &str) -> wit::OfferingRef {
        wit::OfferingRef {
            instance_type: t.into(),
            zone: z.into(),
            capacity_type: c.into(),
        }
    }

    fn short(o: &wit::OfferingRef) -> String {
        format!("{}/{}/{}", o.instance_type, o.zone, o.capacity_type)
    }

    #[test]
    fn no_capacity_marks_what_the_provider_named_or_everything_the_claim_allowed() {
        let named = wit::Error::InsufficientCapacity(wit::InsufficientCapacity {
            message: "none".into(),
            offerings: vec![offering("b", "z1", "spot")],
        });
        let LaunchFailure::Unavailable { offerings } = decide(&claim(), Some(&named), "") else {
            panic!("not unavailable");
        };
        assert_eq!(
            offerings.iter().map(short).collect::<Vec<_>>(),
            ["b/z1/spot"]
        );

        let unnamed = wit::Error::InsufficientCapacity(wit::InsufficientCapacity {
            message: "none".into(),
            offerings: vec![],
        });
        let LaunchFailure::Unavailable { offerings } = decide(&claim(), Some(&unnamed), "") else {
            panic!("not unavailable");
        };
        assert_eq!(
            offerings.iter().map(short).collect::<Vec<_>>(),
            ["a/z1/spot", "a/z1/on-demand", "b/z1/spot", "b/z1/on-demand"]
        );
    }

    #[test]
    fn a_create_error_keeps_the_claim_and_retries_sooner_when_retryable() {
        let create = |retryable| {
            wit::Error::CreateError(wit::CreateError {
                reason: "QuotaExceeded".into(),
                message: "over quota".into(),
                retryable,
            })
        };
        let backoff = |e: &wit::Error| match decide(&claim(), Some(e), "") {
            LaunchFailure::Retry {
                reason, backoff, ..
            } => {
                assert_eq!(reason, "QuotaExceeded");
                backoff
            }
            other => panic!("{other:?}"),
        };
        let (retryable, not) = (backoff(&create(true)), backoff(&create(false)));
        assert_eq!(retryable.after(1), Duration::from_secs(1));
        assert_eq!(retryable.after(3), Duration::from_secs(4));
        assert_eq!(retryable.after(40), Duration::from_secs(10));
        assert_eq!(not.after(1), Duration::from_secs(60));
    }

    #[test]
    fn other_failures_retry_as_launch_failed_and_not_ready_deletes() {
        let other = decide(&claim(), None, "plugin trapped");
        let LaunchFailure::Retry {
            reason,
            message,
            backoff,
        } = &other
        else {
            panic!("{other:?}");
        };
        assert_eq!(
            (reason.as_str(), message.as_str(), backoff.most),
            ("LaunchFailed", "plugin trapped", Duration::from_secs(15))
        );
        assert_eq!(other.event("default-x", "plugin trapped").0, "LaunchFailed");
        let not_ready = wit::Error::NodeClassNotReady("no subnet".into());
        let decided = decide(&claim(), Some(&not_ready), "");
        assert_eq!(
            decided.event("default-x", ""),
            (
                "NodeClassNotReady",
                "NodeClaim default-x event: no subnet".to_string()
            )
        );
    }
}
