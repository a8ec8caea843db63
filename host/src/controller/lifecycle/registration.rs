//! Registration: the Node whose providerID matches joins the NodeClaim. The
//! Node gets the NodeClaim's labels and taints, the termination finalizer and
//! an owner reference, and loses the unregistered taint that kept pods off
//! it. A NodeClaim whose Node does not come within the registration TTL is
//! deleted (and its instance with it).

use super::{Step, delete_node_claim as delete};
use crate::controller::{Ctx, conditions};
use crate::crds::nodeclaim::conditions::REGISTERED;
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::slim::Node;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use std::time::Duration;
use vocabulary::labels::{REGISTERED as REGISTERED_LABEL, TERMINATION_FINALIZER};
use vocabulary::taints::UNREGISTERED as UNREGISTERED_TAINT;

pub(crate) async fn register(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> anyhow::Result<Step> {
    if conditions::is_true(&status.conditions, REGISTERED) {
        return Ok(Step::Continue);
    }
    let Some(id) = status.provider_id.clone() else {
        return Ok(Step::Continue);
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
        if age >= ttl.as_secs_f64() {
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
            return Ok(Step::Deleted);
        }
        conditions::set(
            &mut status.conditions,
            REGISTERED,
            "Unknown",
            "NodeNotFound",
            "Node not registered with cluster",
            nc.metadata.generation,
        );
        let left = ttl.as_secs_f64() - age;
        return Ok(Step::Wait(Duration::from_secs_f64(left.clamp(1.0, 60.0))));
    };
    sync_node(ctx, nc, &node).await?;
    status.node_name = node.metadata.name.clone();
    conditions::set(
        &mut status.conditions,
        REGISTERED,
        "True",
        "Registered",
        "",
        nc.metadata.generation,
    );
    ctx.metrics
        .registered
        .get_or_create(&crate::controller::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    ctx.events
        .normal(
            nc,
            "Registered",
            format!(
                "Status condition transitioned, Type: Registered, Status: Unknown -> True, Reason: Registered (node {})",
                node.name_any()
            ),
        )
        .await;
    tracing::info!(nodeclaim = %nc.name_any(), node = %node.name_any(), "registered");
    Ok(Step::Continue)
}

/// Labels, the finalizer, the owner reference and taints in one patch. The
/// taint list has to be replaced whole, so the patch carries the
/// resourceVersion it was computed from and is recomputed on a conflict
/// (kubelets update Nodes all the time).
async fn sync_node(ctx: &Ctx, nc: &NodeClaim, node: &Node) -> anyhow::Result<()> {
    let api = Api::<Node>::all(ctx.client.clone());
    let mut node = node.clone();
    for _ in 0..5 {
        match api
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch(nc, &node)),
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => node = api.get(&node.name_any()).await?,
            r => return Ok(r.map(|_| ())?),
        }
    }
    anyhow::bail!("node {} kept changing; will retry", node.name_any())
}

fn patch(nc: &NodeClaim, node: &Node) -> serde_json::Value {
    let mut labels = nc.labels().clone();
    labels.insert(REGISTERED_LABEL.into(), "true".into());
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        finalizers.push(TERMINATION_FINALIZER.into());
    }
    let mut taints: Vec<Taint> = node
        .taints()
        .iter()
        .filter(|t| t.key != UNREGISTERED_TAINT)
        .cloned()
        .collect();
    for t in nc.spec.taints.iter().chain(&nc.spec.startup_taints) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(t.clone());
        }
    }
    let mut owners = node.owner_references().to_vec();
    let uid = nc.metadata.uid.clone().unwrap_or_default();
    if !owners.iter().any(|o| o.uid == uid) {
        owners.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into(),
            kind: NodeClaim::kind(&()).into(),
            name: nc.name_any(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    serde_json::json!({
        "metadata": {
            "labels": labels,
            "finalizers": finalizers,
            "ownerReferences": owners,
            "resourceVersion": node.resource_version(),
        },
        "spec": {"taints": taints},
    })
}
