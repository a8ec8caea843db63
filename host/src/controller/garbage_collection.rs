//! Garbage collection, both ways: cloud instances that no NodeClaim owns
//! (older than a grace period, so a launch in progress is never taken for a
//! leak) are deleted, and launched NodeClaims whose instance is gone are
//! deleted so their pods get a new node.

use super::Ctx;
use crate::crds::NodeClaim;
use crate::plugins::{objects, wit};
use kube::ResourceExt;
use kube::api::Api;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// An instance younger than this may still be on its way to its NodeClaim.
pub const INSTANCE_GRACE: Duration = Duration::from_secs(30);

pub async fn run(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(ctx.options.gc_interval);
    // Instances without a NodeClaim seen on the previous pass: ones with no
    // creation time are collected on the second sighting.
    let mut suspects = BTreeSet::new();
    loop {
        tick.tick().await;
        if let Err(e) = pass(&ctx, &mut suspects).await {
            tracing::warn!(error = format!("{e:#}"), "garbage collection");
        }
    }
}

pub async fn pass(ctx: &Ctx, suspects: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let mut seen = BTreeSet::new();
    for plugin in ctx.registry.plugins() {
        let instances = match plugin.list().await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(plugin = %plugin.name, error = %e, "cannot list instances");
                continue;
            }
        };
        let claims = ctx.cluster.node_claims.state();
        let names: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
        let live: BTreeSet<&str> = instances.iter().map(|i| i.provider_id.as_str()).collect();

        for i in &instances {
            if names.contains(&i.node_claim) || matches!(i.state, wit::InstanceState::Terminated) {
                continue;
            }
            let old_enough = match i
                .created_at
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            {
                Some(t) => (jiff::Timestamp::now() - t)
                    .total(jiff::Unit::Second)
                    .is_ok_and(|s| s >= INSTANCE_GRACE.as_secs_f64()),
                None => suspects.contains(&i.provider_id),
            };
            seen.insert(i.provider_id.clone());
            // The store may lag behind a NodeClaim just created: ask the API server.
            if !old_enough || api.get_opt(&i.node_claim).await?.is_some() {
                continue;
            }
            tracing::warn!(plugin = %plugin.name, provider_id = %i.provider_id, nodeclaim = %i.node_claim, "deleting an instance no NodeClaim owns");
            let claim = orphan(i, &plugin.metadata);
            match plugin.delete(&claim).await {
                Ok(()) => {}
                Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => {}
                Err(e) => {
                    tracing::warn!(provider_id = %i.provider_id, error = %e, "deleting a leaked instance")
                }
            }
        }

        let schemes = &plugin.metadata.provider_id_schemes;
        for c in &claims {
            let Some(id) = c.provider_id() else { continue };
            let ours = schemes.iter().any(|s| id.starts_with(&format!("{s}://")));
            if !ours || live.contains(id) || c.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // A list can miss an instance; only a not-found from get counts.
            match plugin.get(id).await {
                Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => {
                    tracing::warn!(nodeclaim = %c.name_any(), provider_id = id, "instance is gone; deleting its NodeClaim");
                    ctx.events
                        .warning(
                            &**c,
                            "InstanceGone",
                            format!("Instance {id} no longer exists"),
                        )
                        .await;
                    super::lifecycle::delete_node_claim(ctx, c).await?;
                }
                _ => {}
            }
        }
    }
    *suspects = seen;
    Ok(())
}

/// The NodeClaim an orphaned instance was launched for, rebuilt from what
/// the cloud reports, for the plugin's delete.
fn orphan(i: &wit::Instance, meta: &wit::ProviderMetadata) -> wit::NodeClaim {
    let class = meta.node_classes.first();
    let mut claim = wit::NodeClaim {
        name: i.node_claim.clone(),
        node_pool: i.node_pool.clone(),
        labels: i.labels.clone(),
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        resource_requests: vec![],
        node_class_ref: wit::NodeClassRef {
            group: class.map(|k| k.group.clone()).unwrap_or_default(),
            kind: class.map(|k| k.kind.clone()).unwrap_or_default(),
            name: String::new(),
        },
        provider_id: Some(i.provider_id.clone()),
        image_id: Some(i.image_id.clone()),
        kubelet_version: None,
    };
    claim.requirements.push(objects::requirement_in(
        crate::crds::labels::INSTANCE_TYPE,
        &[&i.instance_type],
    ));
    claim
}
