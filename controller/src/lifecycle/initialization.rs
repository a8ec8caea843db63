//! Initialization: the Node is Ready, its startup taints and Karpenter's
//! known ephemeral taints (not-ready, unreachable, unregistered, cloud
//! provider uninitialized) are gone, and every resource the NodeClaim was
//! made for shows up in its allocatable. Only
//! then is it Initialized (and the NodeClaim Ready), and disruption may
//! consider it.

use super::Step;
use crate::crds::nodeclaim::conditions::{INITIALIZED, REGISTERED};
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::slim::Node;
use crate::{Ctx, conditions};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::time::Duration;
use vocabulary::labels::INITIALIZED as INITIALIZED_LABEL;

/// Initializes the NodeClaim once its Node is: `registered`, the Node as
/// registration just patched it, is newer than the watch's copy.
pub(crate) async fn initialize(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
    registered: Option<Node>,
) -> anyhow::Result<Step> {
    if !conditions::is_true(&status.conditions, REGISTERED)
        || conditions::is_true(&status.conditions, INITIALIZED)
    {
        return Ok(Step::Continue);
    }
    let Some(node) = registered.map(std::sync::Arc::new).or_else(|| {
        status
            .provider_id
            .as_deref()
            .and_then(|id| ctx.cluster.node_by_provider_id(id))
    }) else {
        return Ok(Step::Wait(Duration::from_secs(10)));
    };
    if let Some(why) = not_initialized(nc, &node) {
        // A node says why it is not initialized yet once that has lasted:
        // on its way up it passes through several reasons in seconds, and
        // each written would be a status write per reason per node.
        if let Some(left) = reason_held_back(status, jiff::Timestamp::now()) {
            return Ok(Step::Wait(left));
        }
        conditions::set(
            &mut status.conditions,
            INITIALIZED,
            "Unknown",
            "NotInitialized",
            &why,
            nc.metadata.generation,
        );
        return Ok(Step::Wait(Duration::from_secs(30)));
    }
    if node.label(INITIALIZED_LABEL) != Some("true") {
        let patch = serde_json::json!({"metadata": {"labels": {INITIALIZED_LABEL: "true"}}});
        Api::<Node>::all(ctx.client.clone())
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    conditions::set(
        &mut status.conditions,
        INITIALIZED,
        "True",
        "Initialized",
        "",
        nc.metadata.generation,
    );
    ctx.metrics
        .initialized
        .get_or_create(&crate::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    tracing::info!(nodeclaim = %nc.name_any(), node = %node.name_any(), "initialized");
    Ok(Step::Continue)
}

/// How long a registered node may be uninitialized before the reason is
/// written on its NodeClaim.
const REASON_AFTER: Duration = Duration::from_secs(30);

/// How long until the reason is written, if not yet: [`REASON_AFTER`]
/// from the Registered condition's transition.
fn reason_held_back(status: &NodeClaimStatus, now: jiff::Timestamp) -> Option<Duration> {
    let registered_for = status
        .conditions
        .iter()
        .find(|c| c.type_ == REGISTERED)
        .and_then(|c| Duration::try_from(now.duration_since(c.last_transition_time.0)).ok())
        .unwrap_or_default();
    REASON_AFTER
        .checked_sub(registered_for)
        .filter(|left| !left.is_zero())
        .map(|left| left.max(Duration::from_secs(1)))
}

/// Why the Node is not initialized yet, or `None` when it is.
pub fn not_initialized(nc: &NodeClaim, node: &Node) -> Option<String> {
    if !node.is_ready() {
        return Some("Node not ready".into());
    }
    let taints = node.taints();
    if let Some(t) = taints.iter().find(|t| {
        nc.spec
            .startup_taints
            .iter()
            .any(|s| s.key == t.key && s.effect == t.effect)
    }) {
        return Some(format!("StartupTaint {:?} still exists", t.key));
    }
    // An initialized node's taints all count in scheduling, so one that is
    // still tainted not-ready would turn away the pods it was made for.
    if let Some(t) = taints
        .iter()
        .find(|t| crate::snapshot::nodes::taint(t).is_ok_and(|t| t.is_ephemeral()))
    {
        return Some(format!(
            "KnownEphemeralTaint \"{}:{}\" still exists",
            t.key, t.effect
        ));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    for (name, q) in nc.spec.resources.iter().flat_map(|r| &r.requests) {
        let wanted = engine::parse_resource(name, &q.0).unwrap_or(0);
        let have = allocatable
            .and_then(|a| a.get(name))
            .and_then(|v| engine::parse_resource(name, &v.0).ok())
            .unwrap_or(0);
        if wanted > 0 && have == 0 {
            return Some(format!(
                "Resource {name:?} was requested but not registered"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c"},
            "spec": {
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                "requirements": [],
                "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "1"}}
            }
        }))
        .expect("a NodeClaim")
    }

    fn ready_node(taints: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "2"}
            }
        }))
        .expect("a Node")
    }

    #[test]
    fn the_reason_waits_until_the_node_has_been_registered_a_while() {
        let registered_at = jiff::Timestamp::from_second(1_000).expect("a time");
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
        let status = NodeClaimStatus {
            conditions: vec![Condition {
                type_: REGISTERED.into(),
                status: "True".into(),
                reason: "Registered".into(),
                message: String::new(),
                last_transition_time: Time(registered_at),
                observed_generation: None,
            }],
            ..NodeClaimStatus::default()
        };
        let at = |s: i64| registered_at + jiff::SignedDuration::from_secs(s);
        assert_eq!(
            reason_held_back(&status, at(5)),
            Some(Duration::from_secs(25)),
            "a node on its way up: looked at again when the reason is due"
        );
        assert_eq!(reason_held_back(&status, at(30)), None);
        assert_eq!(
            reason_held_back(&status, at(600)),
            None,
            "a stuck node says why"
        );
    }

    #[test]
    fn a_ready_node_waits_for_its_ephemeral_and_startup_taints() {
        let nc = claim();
        assert_eq!(
            not_initialized(&nc, &ready_node(serde_json::json!([]))),
            None
        );
        let why = not_initialized(
            &nc,
            &ready_node(
                serde_json::json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
            ),
        );
        assert_eq!(
            why.as_deref(),
            Some("KnownEphemeralTaint \"node.kubernetes.io/not-ready:NoSchedule\" still exists")
        );
        let why = not_initialized(
            &nc,
            &ready_node(serde_json::json!([{"key": "example.com/agent", "effect": "NoSchedule"}])),
        );
        assert_eq!(
            why.as_deref(),
            Some("StartupTaint \"example.com/agent\" still exists")
        );
        let why = not_initialized(
            &nc,
            &ready_node(
                serde_json::json!([{"key": "readiness.k8s.io/cni", "effect": "NoSchedule"}]),
            ),
        );
        assert!(
            why.is_some_and(|w| w.starts_with("KnownEphemeralTaint")),
            "a readiness rule not met yet"
        );
        // A taint of the user's own is no reason to wait.
        assert_eq!(
            not_initialized(
                &nc,
                &ready_node(
                    serde_json::json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
                )
            ),
            None
        );
    }
}
