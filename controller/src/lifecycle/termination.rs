//! NodeClaim deletion: the Node goes first (its own finalizer drains it),
//! then the instance, asked of the plugin until it answers not-found. Only
//! then is the finalizer removed, so an instance is never forgotten.

use crate::crds::NodeClaim;
use crate::records;
use crate::slim::Node;
use crate::{Ctx, node_classes};
use karpenter_runtime::{CallError, wit};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use std::time::Duration;
use vocabulary::labels::{self, TERMINATION_FINALIZER};

/// The next step of a NodeClaim's deletion, from the stored NodeClaim and
/// the Node with its providerID.
#[derive(Debug, PartialEq)]
enum Next {
    /// Not ours to finalize (no termination finalizer, or already released).
    Nothing,
    /// Delete the Node; its termination drains it.
    DeleteNode,
    /// The Node is draining: look again shortly.
    AwaitNode,
    /// No Node is left: ask the plugin to delete the instance.
    DeleteInstance,
}

fn next(nc: &NodeClaim, node: Option<&Node>) -> Next {
    if !nc.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Next::Nothing;
    }
    match node {
        Some(n) if n.metadata.deletion_timestamp.is_none() => Next::DeleteNode,
        Some(_) => Next::AwaitNode,
        None => Next::DeleteInstance,
    }
}

/// Whether the plugin's answer to a delete releases the NodeClaim: only a
/// not-found does, so the finalizer outlives the instance. An accepted
/// delete is asked again until the plugin says not-found.
fn released(answer: &Result<(), CallError>) -> Result<bool, &CallError> {
    match answer {
        Ok(()) => Ok(false),
        Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => Ok(true),
        Err(e) => Err(e),
    }
}

pub async fn finalize(ctx: &Ctx, nc: &NodeClaim) -> anyhow::Result<Action> {
    let node = nc
        .provider_id()
        .and_then(|id| ctx.cluster.node_by_provider_id(id));
    match next(nc, node.as_deref()) {
        Next::Nothing => return Ok(Action::await_change()),
        Next::DeleteNode => {
            let name = node.map(|n| n.name_any()).unwrap_or_default();
            match Api::<Node>::all(ctx.client.clone())
                .delete(&name, &Default::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        Next::AwaitNode => return Ok(Action::requeue(Duration::from_secs(2))),
        Next::DeleteInstance => {}
    }
    let r = &nc.spec.node_class_ref;
    let (plugin, _) = node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
    let claim = records::node_claim(nc, None)?;
    let answer = plugin.delete(&claim).await;
    match released(&answer) {
        Ok(true) => {}
        Ok(false) => return Ok(Action::requeue(Duration::from_secs(5))),
        Err(e) => return Err(anyhow::anyhow!("{e}")),
    }
    if nc.labels().get(labels::CAPACITY_TYPE).map(String::as_str) == Some(labels::RESERVED) {
        ctx.instance_types.expire();
    }
    super::remove_finalizer(ctx, nc).await?;
    ctx.metrics
        .terminated
        .get_or_create(&crate::metrics::Metrics::pool(
            nc.node_pool().unwrap_or_default(),
        ))
        .inc();
    tracing::info!(nodeclaim = %nc.name_any(), "instance deleted; NodeClaim released");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn failed(error: wit::Error) -> Result<(), CallError> {
        Err(CallError::Provider {
            plugin: "p".into(),
            call: "delete",
            error,
        })
    }

    #[test]
    fn the_node_goes_before_the_instance() {
        let nc: NodeClaim = fixtures::claim("a").deleting().build();
        let node: Node = fixtures::node("a").build();
        assert_eq!(next(&nc, Some(&node)), Next::DeleteNode);
        let draining: Node = fixtures::node("a").deleting().build();
        assert_eq!(next(&nc, Some(&draining)), Next::AwaitNode);
        assert_eq!(next(&nc, None), Next::DeleteInstance);
    }

    #[test]
    fn a_claim_without_the_finalizer_is_not_finalized_again() {
        let nc: NodeClaim = fixtures::claim("a")
            .deleting()
            .finalizers(&["example.com/other"])
            .build();
        assert_eq!(next(&nc, None), Next::Nothing);
        let node: Node = fixtures::node("a").build();
        assert_eq!(
            next(&nc, Some(&node)),
            Next::Nothing,
            "its Node is not ours to delete either"
        );
    }

    #[test]
    fn only_not_found_releases_the_claim() {
        assert!(
            matches!(released(&Ok(())), Ok(false)),
            "accepted: ask again"
        );
        let gone = failed(wit::Error::NotFound("gone".into()));
        assert!(matches!(released(&gone), Ok(true)));
        let throttled = failed(wit::Error::NodeClassNotReady("throttled".into()));
        assert!(
            released(&throttled).is_err(),
            "any other error keeps the finalizer"
        );
        let crashed = Err(CallError::Failed {
            plugin: "p".into(),
            call: "delete",
            message: "trapped".into(),
        });
        assert!(
            released(&crashed).is_err(),
            "a plugin that failed proves nothing"
        );
    }
}
