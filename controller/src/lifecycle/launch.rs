//! Launch: the plugin that owns the NodeClaim's NodeClass creates the
//! instance. Creation is idempotent by NodeClaim name on the plugin's side,
//! so a launch interrupted by a crash is simply asked for again.

use super::launch_failure::{self, Backoff, LaunchFailure};
use super::{Step, delete_node_claim as delete, plugin_output};
use crate::crds::nodeclaim::conditions::LAUNCHED;
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::records;
use crate::{Ctx, conditions, node_classes};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use vocabulary::labels;

pub(crate) async fn launch(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> anyhow::Result<Step> {
    if conditions::is_true(&status.conditions, LAUNCHED) {
        return Ok(Step::Continue);
    }
    if let Some(wait) = ctx.launch_backoff.remaining(nc, Instant::now()) {
        return Ok(Step::Wait(wait));
    }
    ctx.batch_writes.settled().await;
    let generation = nc.metadata.generation;
    let r = &nc.spec.node_class_ref;
    let not_launched = |status: &mut NodeClaimStatus, reason: &str, message: &str| {
        conditions::set(
            &mut status.conditions,
            LAUNCHED,
            "False",
            reason,
            message,
            generation,
        );
    };
    let (plugin, kind) = match node_classes::resolve(&ctx.registry, &r.group, &r.kind) {
        Ok(found) => found,
        Err(e) => {
            not_launched(status, "NoProvider", &format!("{e:#}"));
            return Ok(Step::Wait(Duration::from_secs(30)));
        }
    };
    let Some((_, class)) = ctx.node_classes.get(&kind, &r.name).await? else {
        not_launched(
            status,
            "NodeClassNotFound",
            &format!("{} {} not found", r.kind, r.name),
        );
        return Ok(Step::Wait(Duration::from_secs(30)));
    };
    let claim = records::node_claim(nc, None)?;
    let instance = match plugin.create(&claim, &class).await {
        Ok(i) => i,
        Err(e) => {
            let message = e.to_string();
            let failure = launch_failure::decide(nc, e.provider_error(), &message);
            let (reason, event) = failure.event(&nc.name_any(), &message);
            ctx.events.warning(nc, reason, event).await;
            tell_pods(
                ctx,
                &nc.name_any(),
                failure.pod_event(&nc.name_any(), &message),
            );
            return match failure {
                LaunchFailure::Unavailable { offerings } => {
                    ctx.unavailable.mark(&offerings, Instant::now());
                    tracing::info!(nodeclaim = %nc.name_any(), error = %message, "insufficient capacity; deleting the NodeClaim");
                    delete(ctx, nc).await?;
                    Ok(Step::Deleted)
                }
                LaunchFailure::NodeClassNotReady { .. } => {
                    delete(ctx, nc).await?;
                    Ok(Step::Deleted)
                }
                LaunchFailure::Retry {
                    reason,
                    message,
                    backoff,
                } => {
                    not_launched(status, &reason, &message);
                    let wait = ctx.launch_backoff.failed(nc, Instant::now(), backoff);
                    Ok(Step::Wait(wait))
                }
            };
        }
    };

    ctx.claim_pods.take(&nc.name_any());
    ctx.launch_backoff.forget(nc);
    if instance.capacity_type == labels::RESERVED {
        ctx.instance_types.expire();
    }
    let (id, name) = (instance.provider_id.as_str(), nc.name_any());
    let conflict = match ctx
        .cluster
        .node_claims
        .find(|c| plugin_output::owned_by_another(c, id, &name))
    {
        Some(other) => Some(format!(
            "providerID {id} already belongs to NodeClaim {}",
            other.name_any()
        )),
        None => ctx
            .cluster
            .nodes
            .find(|n| plugin_output::unmanaged_node(n, id))
            .map(|n| {
                format!(
                    "providerID {id} is Node {}'s, which Karpenter does not manage",
                    n.name_any()
                )
            }),
    };
    if let Some(why) = conflict {
        let message = format!(
            "plugin {} returned an instance the host refuses: {why}",
            plugin.name
        );
        tracing::error!(nodeclaim = %nc.name_any(), error = %message, "launch refused");
        not_launched(status, "ProviderIDConflict", &message);
        ctx.events.warning(nc, "LaunchFailed", message).await;
        let wait =
            ctx.launch_backoff
                .failed(nc, Instant::now(), Backoff::fixed(Duration::from_secs(60)));
        return Ok(Step::Wait(wait));
    }
    // The NodeClaim carries the labels its Node will have.
    let mut fields = vec![
        (labels::INSTANCE_TYPE, instance.instance_type.as_str()),
        (labels::CAPACITY_TYPE, instance.capacity_type.as_str()),
    ];
    if !instance.zone.is_empty() {
        fields.push((labels::ZONE, instance.zone.as_str()));
    }
    let (add, refused) = plugin_output::labels_to_add(nc.labels(), &instance.labels, &fields);
    if !refused.is_empty() {
        tracing::warn!(nodeclaim = %nc.name_any(), plugin = %plugin.name, labels = ?refused, "labels the plugin may not set or change are left out");
    }
    if !add.is_empty() {
        Api::<NodeClaim>::all(ctx.client.clone())
            .patch(
                &nc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": add}})),
            )
            .await?;
    }
    let quantities = |list: &[(String, String)]| -> BTreeMap<String, Quantity> {
        list.iter()
            .map(|(k, v)| (k.clone(), Quantity(v.clone())))
            .collect()
    };
    status.provider_id = Some(instance.provider_id.clone());
    status.image_id = Some(instance.image_id.clone()).filter(|i| !i.is_empty());
    status.capacity = quantities(&instance.capacity).into();
    status.allocatable = quantities(&instance.allocatable).into();
    conditions::set(
        &mut status.conditions,
        LAUNCHED,
        "True",
        "Launched",
        "",
        generation,
    );
    ctx.metrics
        .launched
        .get_or_create(&crate::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    tracing::info!(nodeclaim = %nc.name_any(), provider_id = %instance.provider_id, instance_type = %instance.instance_type, zone = %instance.zone, capacity_type = %instance.capacity_type, "launched");
    Ok(Step::Continue)
}

/// Warns the pods NodeClaim `name` was made for, off the launch's path.
fn tell_pods(ctx: &Ctx, name: &str, note: String) {
    let pods = ctx.claim_pods.take(name);
    if pods.is_empty() {
        return;
    }
    let events = ctx.events.clone();
    tokio::spawn(async move {
        for pod in &pods {
            events.warning(pod, "LaunchFailed", note.clone()).await;
        }
    });
}
