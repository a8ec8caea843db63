//! Initialization: the Node is Ready, its startup taints are gone and every
//! resource the NodeClaim was made for shows up in its allocatable. Only
//! then is it Initialized (and the NodeClaim Ready), and disruption may
//! consider it.

use super::Step;
use crate::controller::{Ctx, conditions};
use crate::crds::labels::{INITIALIZED as INITIALIZED_LABEL, UNREGISTERED_TAINT};
use crate::crds::nodeclaim::conditions::{INITIALIZED, REGISTERED};
use crate::crds::{NodeClaim, NodeClaimStatus};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::time::Duration;

pub(crate) async fn initialize(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> anyhow::Result<Step> {
    if !conditions::is_true(&status.conditions, REGISTERED)
        || conditions::is_true(&status.conditions, INITIALIZED)
    {
        return Ok(Step::Continue);
    }
    let Some(node) = status
        .provider_id
        .as_deref()
        .and_then(|id| ctx.cluster.node_by_provider_id(id))
    else {
        return Ok(Step::Wait(Duration::from_secs(10)));
    };
    if let Some(why) = not_initialized(nc, &node) {
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
    if node.labels().get(INITIALIZED_LABEL).map(String::as_str) != Some("true") {
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
        .get_or_create(&crate::controller::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    ctx.events
        .normal(
            nc,
            "Initialized",
            "Status condition transitioned, Type: Initialized, Status: Unknown -> True, Reason: Initialized".into(),
        )
        .await;
    tracing::info!(nodeclaim = %nc.name_any(), node = %node.name_any(), "initialized");
    Ok(Step::Continue)
}

/// Why the Node is not initialized yet, or `None` when it is.
pub fn not_initialized(nc: &NodeClaim, node: &Node) -> Option<String> {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Some("Node not ready".into());
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .cloned()
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == UNREGISTERED_TAINT) {
        return Some("Node still has the unregistered taint".into());
    }
    if let Some(t) = taints.iter().find(|t| {
        nc.spec
            .startup_taints
            .iter()
            .any(|s| s.key == t.key && s.effect == t.effect)
    }) {
        return Some(format!("StartupTaint {:?} still exists", t.key));
    }
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
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
