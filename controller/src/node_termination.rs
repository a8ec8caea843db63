//! Node termination: a Node with the termination finalizer that is being
//! deleted is tainted `karpenter.sh/disrupted:NoSchedule` and drained through
//! the Eviction API, so PodDisruptionBudgets are honoured (a 429 means a
//! budget blocks: try again later). Pods go in Karpenter's order: regular
//! pods, then critical ones; DaemonSet and mirror pods stay until the Node
//! goes. At the NodeClaim's terminationGracePeriod, what is left is deleted.

use super::Ctx;
use crate::crds::NodeClaim;
use crate::node_patch;
use crate::slim::Node;
use crate::slim::Pod;
use crate::snapshot::cluster::{is_daemon_set_pod, is_terminal};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, EvictParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vocabulary::labels::{self, TERMINATION_FINALIZER};
use vocabulary::taints::DISRUPTED as DISRUPTED_TAINT;

const RETRY: Duration = Duration::from_secs(2);
/// Evictions (or deletions) one drain has in flight at once.
const EVICTIONS_AT_ONCE: usize = 16;

/// Drains each deleting Node once; `nodes` are the watcher's Node events.
pub async fn run(ctx: Arc<Ctx>) {
    let draining: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let mut nodes = ctx.cluster.node_events.subscribe();
    // Nodes already deleting when this replica started leading.
    let initial: Vec<Arc<Node>> = ctx.cluster.nodes.state();
    let mut initial = initial.into_iter();
    loop {
        let node = match initial.next() {
            Some(n) => n,
            None => match nodes.recv().await {
                Ok(change) => match ctx.cluster.nodes.get(&ObjectRef::new(&change.name)) {
                    Some(n) => n,
                    None => continue,
                },
                // Missed changes: look at every Node again.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    initial = ctx.cluster.nodes.state().into_iter();
                    continue;
                }
                Err(_) => return,
            },
        };
        if node.metadata.deletion_timestamp.is_none()
            || !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER)
        {
            continue;
        }
        let name = node.name_any();
        if !draining
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone())
        {
            continue;
        }
        let (ctx, draining) = (ctx.clone(), draining.clone());
        tokio::spawn(async move {
            while let Err(e) = terminate(&ctx, &name).await {
                tracing::warn!(node = %name, error = format!("{e:#}"), "node termination");
                tokio::time::sleep(RETRY).await;
            }
            draining
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
        });
    }
}

/// Works from the watch's copy of the Node: its edits keep what others
/// changed ([`node_patch`]), so no pass needs a read of its own.
async fn terminate(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let nodes = Api::<Node>::all(ctx.client.clone());
    let watched = || ctx.cluster.nodes.get(&ObjectRef::new(name));
    loop {
        let Some(node) = watched() else {
            return Ok(());
        };
        if !node.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
            return Ok(());
        }
        taint(&nodes, &node).await?;
        let grace_over = grace_period_over(ctx, &node);
        // Not `into_iter().filter().collect()`: that reuses the whole store's
        // buffer, and a thousand nodes draining at once each held one.
        let pods: Vec<Arc<Pod>> = ctx
            .cluster
            .pods
            .state()
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
            .filter(|p| !is_terminal(p) && !is_daemon_set_pod(p) && !is_mirror(p))
            .cloned()
            .collect();
        if pods.is_empty() {
            break;
        }
        // Regular pods first; critical ones once those are gone.
        let critical = |p: &Pod| {
            matches!(
                p.spec
                    .as_ref()
                    .and_then(|s| s.priority_class_name.as_deref()),
                Some("system-cluster-critical" | "system-node-critical")
            )
        };
        let regular: Vec<&Arc<Pod>> = pods.iter().filter(|p| !critical(p)).collect();
        let group = if regular.is_empty() {
            pods.iter().collect()
        } else {
            regular
        };
        // Several evictions in flight at once: one by one, a node of a
        // hundred pods waited out a hundred round trips.
        let due: Vec<Arc<Pod>> = group
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() || grace_over)
            .cloned()
            .collect();
        let mut sent = futures::stream::iter(due)
            .map(|p| async move { remove_pod(ctx, &p, grace_over).await })
            .buffer_unordered(EVICTIONS_AT_ONCE);
        while let Some(r) = sent.next().await {
            r?;
        }
        tokio::time::sleep(RETRY).await;
    }
    if let Some(node) = watched() {
        let drop = |n: &Node| node_patch::drop_finalizer(n, TERMINATION_FINALIZER);
        if node_patch::apply(&nodes, &node, drop).await?.is_none() {
            return Ok(());
        }
        let pool = node
            .label(vocabulary::labels::NODE_POOL)
            .map(str::to_string);
        ctx.metrics
            .nodes_terminated
            .get_or_create(&super::metrics::Metrics::pool(&pool.unwrap_or_default()))
            .inc();
        if let Some(asked) = &node.metadata.deletion_timestamp {
            let took = (jiff::Timestamp::now() - asked.0)
                .total(jiff::Unit::Second)
                .unwrap_or(0.0);
            ctx.metrics.termination_duration.observe(took.max(0.0));
        }
        tracing::info!(node = %name, "drained");
    }
    Ok(())
}

/// Evicts a pod, or deletes it once the grace period is over; a pod gone
/// already, or one a PodDisruptionBudget protects for now, is no error.
async fn remove_pod(ctx: &Ctx, p: &Pod, grace_over: bool) -> anyhow::Result<()> {
    let api = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(
        ctx.client.clone(),
        &p.namespace().unwrap_or_default(),
    );
    let r = if grace_over {
        api.delete(&p.name_any(), &DeleteParams::default().grace_period(0))
            .await
            .map(|_| ())
    } else {
        let r = api
            .evict(&p.name_any(), &EvictParams::default())
            .await
            .map(|_| ());
        ctx.metrics.evicted(match &r {
            Ok(()) => 200,
            Err(kube::Error::Api(e)) => e.code,
            Err(_) => 0,
        });
        r
    };
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 429 => {
            tracing::debug!(pod = %p.name_any(), "eviction blocked by a PodDisruptionBudget");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Adds `karpenter.sh/disrupted:NoSchedule`, so nothing new lands on it.
pub(crate) async fn taint(nodes: &Api<Node>, node: &Node) -> anyhow::Result<()> {
    let disrupted = Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    let edit = |n: &Node| {
        if n.taints().iter().any(|t| t.key == DISRUPTED_TAINT) {
            return Vec::new();
        }
        node_patch::taint_ops(n, |_| false, std::slice::from_ref(&disrupted))
    };
    node_patch::apply(nodes, node, edit).await?;
    Ok(())
}

fn is_mirror(p: &Pod) -> bool {
    p.annotations().contains_key(vocabulary::labels::MIRROR_POD)
}

/// Whether the owning NodeClaim's terminationGracePeriod has passed since
/// the Node's deletion began.
fn grace_period_over(ctx: &Ctx, node: &Node) -> bool {
    let Some(deleted) = &node.metadata.deletion_timestamp else {
        return false;
    };
    let id = node.provider_id().map(str::to_string);
    let claim: Option<Arc<NodeClaim>> = id.and_then(|id| {
        ctx.cluster
            .node_claims
            .find(|c| c.provider_id() == Some(id.as_str()))
    });
    // An interruption's deadline: the instance will not wait.
    let deadline = claim
        .as_ref()
        .and_then(|c| c.annotations().get(labels::NODECLAIM_TERMINATION_TIMESTAMP))
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    if deadline.is_some_and(|d| jiff::Timestamp::now() >= d) {
        return true;
    }
    let Some(grace) = claim
        .and_then(|c| c.spec.termination_grace_period.clone())
        .and_then(|g| vocabulary::duration::parse(&g).ok())
    else {
        return false;
    };
    let elapsed = (jiff::Timestamp::now() - deleted.0)
        .total(jiff::Unit::Second)
        .unwrap_or(0.0);
    elapsed >= grace.as_secs_f64()
}
