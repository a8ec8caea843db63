//! Registration: the Node whose providerID matches joins the NodeClaim. The
//! Node gets the NodeClaim's labels and taints (its startup taints once),
//! the termination finalizer and an owner reference, and loses the
//! unregistered taint that kept pods off it. A NodeClaim whose Node does not
//! come within the registration TTL is deleted (and its instance with it).

use super::{Step, delete_node_claim as delete, initialization};
use crate::crds::nodeclaim::conditions::REGISTERED;
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::slim::Node;
use crate::{Ctx, conditions, node_patch};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use std::time::Duration;
use vocabulary::labels::{
    INITIALIZED as INITIALIZED_LABEL, REGISTERED as REGISTERED_LABEL, TERMINATION_FINALIZER,
};
use vocabulary::taints::UNREGISTERED as UNREGISTERED_TAINT;

/// Registers the NodeClaim's Node if it has come; the Node as registration
/// left it, when this call patched it.
pub(crate) async fn register(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> anyhow::Result<(Step, Option<Node>)> {
    if conditions::is_true(&status.conditions, REGISTERED) {
        return Ok((Step::Continue, None));
    }
    let Some(id) = status.provider_id.clone() else {
        return Ok((Step::Continue, None));
    };
    let Some(node) = ctx.cluster.node_by_provider_id(&id) else {
        let age = nc
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| {
                (jiff::Timestamp::now() - t.0)
                    .total(jiff::Unit::Second)
                    .unwrap_or(0.0)
            })
            .unwrap_or(0.0);
        let ttl = ctx.options.registration_ttl;
        let Some(left) = time_left(age, ttl) else {
            ctx.events
                .warning(
                    nc,
                    "RegistrationTimeout",
                    format!(
                        "Node not registered with cluster within {}s; deleting the NodeClaim",
                        ttl.as_secs()
                    ),
                )
                .await;
            tracing::warn!(nodeclaim = %nc.name_any(), provider_id = %id, "registration timed out; deleting");
            delete(ctx, nc).await?;
            return Ok((Step::Deleted, None));
        };
        conditions::set(
            &mut status.conditions,
            REGISTERED,
            "Unknown",
            "NodeNotFound",
            "Node not registered with cluster",
            nc.metadata.generation,
        );
        return Ok((Step::Wait(left), None));
    };
    let node = sync_node(ctx, nc, &node).await?;
    status.node_name = node.metadata.name.clone();
    conditions::set(
        &mut status.conditions,
        REGISTERED,
        "True",
        "Registered",
        "",
        nc.metadata.generation,
    );
    let pool = crate::metrics::Metrics::pool(nc.node_pool().unwrap_or_default());
    ctx.metrics.registered.get_or_create(&pool).inc();
    ctx.metrics.nodes_created.get_or_create(&pool).inc();
    tracing::info!(nodeclaim = %nc.name_any(), node = %node.name_any(), "registered");
    Ok((Step::Continue, Some(node)))
}

/// How long until a NodeClaim `age_seconds` old whose Node has not come is
/// looked at again (at least a second, at most a minute), or `None` once
/// the registration TTL is spent.
fn time_left(age_seconds: f64, ttl: Duration) -> Option<Duration> {
    let left = ttl.as_secs_f64() - age_seconds;
    (left > 0.0).then(|| Duration::from_secs_f64(left.clamp(1.0, 60.0)))
}

/// Labels, the finalizer, the owner reference and taints in one JSON patch
/// that keeps what others changed ([`node_patch`]); the Node as patched.
async fn sync_node(ctx: &Ctx, nc: &NodeClaim, node: &Node) -> anyhow::Result<Node> {
    let api = Api::<Node>::all(ctx.client.clone());
    node_patch::apply(&api, node, |n| patch(nc, n))
        .await?
        .ok_or_else(|| anyhow::anyhow!("node {} is gone", node.name_any()))
}

/// A JSON pointer's segment for `key` (RFC 6901).
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn patch(nc: &NodeClaim, node: &Node) -> Vec<serde_json::Value> {
    use serde_json::json;
    let unregistered = |t: &Taint| t.key == UNREGISTERED_TAINT;
    // Startup taints go on once, in the patch that labels the Node
    // registered: on a Node with that label, whatever removed them since (an
    // agent now running) must not see them come back. A registration done
    // again (its status write lost, or its leader gone before it) finds it.
    let startup: &[Taint] = if node.label(REGISTERED_LABEL) == Some("true") {
        &[]
    } else {
        &nc.spec.startup_taints
    };
    let mut taints: Vec<Taint> = Vec::new();
    for t in nc.spec.taints.iter().chain(startup) {
        let has = |x: &Taint| x.key == t.key && x.effect == t.effect;
        let on_node = node.taints().iter().any(|x| !unregistered(x) && has(x));
        if !on_node && !taints.iter().any(has) {
            taints.push(t.clone());
        }
    }

    let mut ops = Vec::new();
    let mut labels = nc.labels().clone();
    labels.insert(REGISTERED_LABEL.into(), "true".into());
    // A Node that is initialized as soon as it is registered (up and Ready
    // before the NodeClaim saw it) is labelled so in the same patch.
    if initialization::not_initialized(nc, &registered(node, &taints)).is_none() {
        labels.insert(INITIALIZED_LABEL.into(), "true".into());
    }
    labels.retain(|k, v| node.label(k) != Some(v.as_str()));
    if node.labels().next().is_none() {
        if !labels.is_empty() {
            ops.push(json!({"op": "test", "path": "/metadata/labels", "value": null}));
            ops.push(json!({"op": "add", "path": "/metadata/labels", "value": labels}));
        }
    } else {
        for (k, v) in &labels {
            let path = format!("/metadata/labels/{}", pointer(k));
            ops.push(json!({"op": "add", "path": path, "value": v}));
        }
    }

    let finalizer: &[String] = if node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        &[]
    } else {
        &[TERMINATION_FINALIZER.to_owned()]
    };
    let have = node.metadata.finalizers.as_deref();
    node_patch::list_ops(&mut ops, "/metadata/finalizers", have, |_| false, finalizer);

    let uid = nc.metadata.uid.clone().unwrap_or_default();
    let mut owner = Vec::new();
    if !node.owner_references().iter().any(|o| o.uid == uid) {
        owner.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into(),
            kind: NodeClaim::kind(&()).into(),
            name: nc.name_any(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    let have = node.metadata.owner_references.as_deref();
    node_patch::list_ops(
        &mut ops,
        "/metadata/ownerReferences",
        have,
        |_| false,
        &owner,
    );

    ops.extend(node_patch::taint_ops(node, unregistered, &taints));
    ops
}

/// `node`'s taints once registration has patched it: the unregistered taint
/// gone, `added` appended.
fn registered(node: &Node, added: &[Taint]) -> Node {
    let mut after = node.clone();
    let kept = node.taints().iter().filter(|t| t.key != UNREGISTERED_TAINT);
    after.spec.get_or_insert_with(Default::default).taints =
        Some(kept.chain(added).cloned().collect());
    after
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::node_patch::apply_locally;

    #[test]
    fn a_node_that_does_not_come_in_time_ends_its_claim() {
        let ttl = Duration::from_secs(900);
        assert_eq!(time_left(0.0, ttl), Some(Duration::from_secs(60)));
        assert_eq!(time_left(880.0, ttl), Some(Duration::from_secs(20)));
        assert_eq!(time_left(899.5, ttl), Some(Duration::from_secs(1)));
        assert_eq!(time_left(900.0, ttl), None);
        assert_eq!(time_left(5_000.0, ttl), None);
    }

    fn keys(node: &Node) -> Vec<(String, String)> {
        node.taints()
            .iter()
            .map(|t| (t.key.clone(), t.effect.clone()))
            .collect()
    }

    #[test]
    fn the_node_takes_the_claims_labels_taints_finalizer_and_owner() {
        let nc: NodeClaim = fixtures::claim("a")
            .label("team", "web")
            .label("example.com/tier", "front")
            .taint("dedicated", "NoSchedule")
            .startup_taint("example.com/agent", "NoExecute")
            .build();
        let node: Node = fixtures::node("a")
            .label("team", "kubelet-said")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .taint("dedicated", "NoSchedule")
            .finalizers(&["example.com/csi"])
            .build();
        let ops = patch(&nc, &node);
        assert!(
            !ops.iter().any(|o| o["path"] == "/metadata/resourceVersion"),
            "not tied to a resourceVersion: {ops:?}"
        );
        let synced = apply_locally(&node, &ops).expect("applies");
        assert_eq!(
            synced.label("team"),
            Some("web"),
            "the NodeClaim's labels win"
        );
        assert_eq!(synced.label("example.com/tier"), Some("front"));
        assert_eq!(synced.label("karpenter.sh/registered"), Some("true"));
        assert_eq!(synced.label("karpenter.sh/nodepool"), Some("default"));
        assert_eq!(
            synced.finalizers(),
            ["example.com/csi", TERMINATION_FINALIZER],
            "others' finalizers are kept"
        );
        let owner = &synced.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodeClaim", "a")
        );
        assert_eq!(Some(&owner.uid), nc.metadata.uid.as_ref());
        assert_eq!(owner.block_owner_deletion, Some(true));
        assert_eq!(
            keys(&synced),
            [
                ("node.kubernetes.io/not-ready".into(), "NoSchedule".into()),
                ("dedicated".into(), "NoSchedule".into()),
                ("example.com/agent".into(), "NoExecute".into()),
            ],
            "the unregistered taint goes, the kubelet's stay, the claim's are added once"
        );
        assert!(
            patch(&nc, &synced).is_empty(),
            "a synced Node needs no patch"
        );
    }

    #[test]
    fn a_patch_keeps_what_others_changed_and_refuses_a_list_it_misread() {
        let nc: NodeClaim = fixtures::claim("a").build();
        let seen: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .build();
        let ops = patch(&nc, &seen);
        // The node lifecycle controller taints a new Node not-ready meanwhile:
        // the patch still applies, and keeps that taint.
        let now: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .build();
        let synced = apply_locally(&now, &ops).expect("applies");
        assert_eq!(
            keys(&synced),
            [("node.kubernetes.io/not-ready".into(), "NoSchedule".into())]
        );
        // A status update changes no list: the same patch applies.
        assert!(apply_locally(&seen, &ops).is_ok());
        // A taint put before the one removed moves it: the test fails.
        let moved: Node = fixtures::node("a")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .build();
        assert!(
            apply_locally(&moved, &ops).is_err(),
            "the moved taint's test fails"
        );
        let again = apply_locally(&moved, &patch(&nc, &moved)).expect("recomputed");
        assert_eq!(
            keys(&again),
            [("node.kubernetes.io/not-ready".into(), "NoSchedule".into())]
        );

        // Another writer's finalizer on a Node that had none.
        let finalized: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .finalizers(&["example.com/csi"])
            .build();
        assert_eq!(
            apply_locally(&finalized, &ops).err().as_deref(),
            Some("/metadata/finalizers is present")
        );
        let again = apply_locally(&finalized, &patch(&nc, &finalized)).expect("recomputed");
        assert_eq!(
            again.finalizers(),
            ["example.com/csi", TERMINATION_FINALIZER]
        );
    }

    #[test]
    fn startup_taints_go_on_once() {
        let nc: NodeClaim = fixtures::claim("a")
            .taint("dedicated", "NoSchedule")
            .startup_taint("node.cilium.io/agent-not-ready", "NoExecute")
            .build();
        let booted: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .taint("node.cilium.io/agent-not-ready", "NoExecute")
            .build();
        let registered = apply_locally(&booted, &patch(&nc, &booted)).expect("applies");
        assert_eq!(
            keys(&registered),
            [
                ("node.cilium.io/agent-not-ready".into(), "NoExecute".into()),
                ("dedicated".into(), "NoSchedule".into()),
            ]
        );
        // The agent runs and removes its taint; then the registration is done
        // again, as after a leader that patched the Node died before its
        // status write. The startup taint stays gone, the regular one stays.
        let mut agent_ran = registered.clone();
        if let Some(spec) = agent_ran.spec.as_mut() {
            spec.taints = Some(vec![Taint {
                key: "dedicated".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]);
        }
        assert!(
            patch(&nc, &agent_ran).is_empty(),
            "nothing to redo: {:?}",
            patch(&nc, &agent_ran)
        );
    }

    #[test]
    fn a_node_up_before_it_is_registered_is_labelled_initialized_in_the_same_patch() {
        let initialized = |nc: &NodeClaim, node: &Node| {
            let done = apply_locally(node, &patch(nc, node)).expect("applies");
            done.label(INITIALIZED_LABEL) == Some("true")
        };
        let plain: NodeClaim = fixtures::claim("a")
            .taint("dedicated", "NoSchedule")
            .build();
        let up: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .ready()
            .build();
        assert!(
            initialized(&plain, &up),
            "Ready, and its only taints are the claim's own"
        );
        let booting: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .build();
        assert!(!initialized(&plain, &booting), "not Ready yet");
        let not_ready_taint: Node = fixtures::node("a")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .ready()
            .build();
        assert!(!initialized(&plain, &not_ready_taint), "an ephemeral taint");
        let agent: NodeClaim = fixtures::claim("a")
            .startup_taint("example.com/agent", "NoSchedule")
            .build();
        assert!(
            !initialized(&agent, &up),
            "the startup taint this patch adds waits for its agent"
        );
    }

    #[test]
    fn label_keys_are_escaped_as_json_pointers() {
        assert_eq!(pointer("karpenter.sh/nodepool"), "karpenter.sh~1nodepool");
        assert_eq!(pointer("a~b/c"), "a~0b~1c");
    }
}
