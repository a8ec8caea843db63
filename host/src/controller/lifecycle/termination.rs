//! NodeClaim deletion: the Node goes first (its own finalizer drains it),
//! then the instance, asked of the plugin until it answers not-found. Only
//! then is the finalizer removed, so an instance is never forgotten.

use crate::controller::{Ctx, node_classes};
use crate::crds::NodeClaim;
use crate::records;
use crate::slim::Node;
use karpenter_runtime::wit;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use std::time::Duration;
use vocabulary::labels::TERMINATION_FINALIZER;

pub async fn finalize(ctx: &Ctx, nc: &NodeClaim) -> anyhow::Result<Action> {
    if !nc.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(Action::await_change());
    }
    let node = nc
        .provider_id()
        .and_then(|id| ctx.cluster.node_by_provider_id(id));
    if let Some(node) = node {
        if node.metadata.deletion_timestamp.is_none() {
            match Api::<Node>::all(ctx.client.clone())
                .delete(&node.name_any(), &Default::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let r = &nc.spec.node_class_ref;
    let (plugin, _) = node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
    let claim = records::node_claim(nc, None)?;
    match plugin.delete(&claim).await {
        Ok(()) => return Ok(Action::requeue(Duration::from_secs(5))),
        Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => {}
        Err(e) => return Err(e.into()),
    }
    super::remove_finalizer(ctx, nc).await?;
    ctx.metrics
        .terminated
        .get_or_create(&crate::controller::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    tracing::info!(nodeclaim = %nc.name_any(), "instance deleted; NodeClaim released");
    Ok(Action::await_change())
}
