//! The NodeClaim lifecycle: launch through the plugin that owns its
//! NodeClass, registration of its Node, initialization, and on deletion the
//! termination of Node and instance. One reconcile per NodeClaim at a time
//! (kube's controller runtime serializes them); each step is idempotent, so a
//! restart anywhere resumes where the API server's state says.

mod initialization;
mod launch;
mod launch_backoff;
mod launch_failure;
mod plugin_output;
mod registration;
pub mod termination;
mod written;

pub use launch_backoff::LaunchBackoff;
pub use written::Written;

use super::Ctx;
use super::conditions;
use crate::crds::nodeclaim::conditions::*;
use crate::crds::{NodeClaim, NodeClaimStatus};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config, Controller};
use std::sync::Arc;
use std::time::Duration;
use vocabulary::labels::{self, TERMINATION_FINALIZER};

#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct Error(#[from] anyhow::Error);

/// What a step decided.
pub(crate) enum Step {
    /// Go on to the next step.
    Continue,
    /// Stop here and look again after this long (or when something changes).
    Wait(Duration),
    /// The NodeClaim was deleted; nothing more to do.
    Deleted,
}

pub async fn run(ctx: Arc<Ctx>) {
    let cluster = ctx.cluster.clone();
    // Where Node changes were missed (a burst of them outran this loop),
    // every claim whose next step waits on its Node looks again: its timer
    // would come late, and meanwhile the Node keeps the unregistered taint
    // that turns its pods away.
    let node_triggers = signals(ctx.cluster.node_events.subscribe()).flat_map(move |n| {
        let claims = match n {
            Some(n) => cluster.node_claim_of(&n).into_iter().collect(),
            None => cluster.claims_waiting_on_nodes(),
        };
        futures::stream::iter(claims)
    });
    // The NodeClaims come from the cluster's store rather than a watcher of
    // their own: one copy of each in memory. Every stored claim is looked at
    // when this replica starts leading and whenever changes were missed.
    let store = ctx.cluster.node_claims.clone();
    let initial = futures::stream::iter(store.state());
    let changes = signals(ctx.cluster.node_claim_events.subscribe()).flat_map({
        let store = store.clone();
        move |change| {
            let claims = match change {
                Some(r) => store.get(&r).into_iter().collect(),
                None => store.state(),
            };
            futures::stream::iter(claims)
        }
    });
    Controller::for_shared_stream(initial.chain(changes), store)
        .with_config(Config::default().concurrency(ctx.options.launch_concurrency))
        .reconcile_on(node_triggers)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "nodeclaim reconcile");
            }
        })
        .await;
}

/// A broadcast as a stream; `None` where messages were missed.
fn signals<T: Clone + Send + 'static>(
    rx: tokio::sync::broadcast::Receiver<T>,
) -> impl futures::Stream<Item = Option<T>> + Send {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(n) => Some((Some(n), rx)),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Some((None, rx)),
            Err(_) => None,
        }
    })
}

fn error_policy(nc: Arc<NodeClaim>, e: &Error, _: Arc<Ctx>) -> Action {
    tracing::warn!(nodeclaim = %nc.name_any(), error = %e, "nodeclaim reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

async fn reconcile(nc: Arc<NodeClaim>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.unseen_claims.seen(&nc.name_any());
    if nc.metadata.deletion_timestamp.is_some() {
        ctx.launch_backoff.forget(&nc);
        ctx.status_writes.forget(&nc);
        return Ok(termination::finalize(&ctx, &nc).await?);
    }
    ensure_finalizer(&ctx, &nc).await?;
    let before = nc.status.clone().unwrap_or_default();
    if ctx.status_writes.is_stale(&nc, &before) {
        // The watch brings this controller's own write shortly.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let mut status = before.clone();
    for t in [LAUNCHED, REGISTERED, INITIALIZED, READY] {
        if !status.conditions.iter().any(|c| c.type_ == t) {
            conditions::set(
                &mut status.conditions,
                t,
                "Unknown",
                "AwaitingReconciliation",
                "object is awaiting reconciliation",
                nc.metadata.generation,
            );
        }
    }
    // Whatever the steps got done is written even when a later one fails,
    // so a retry does not repeat it.
    let step = steps(&ctx, &nc, &mut status).await;
    if let Ok(Step::Deleted) = step {
        ctx.status_writes.forget(&nc);
        return Ok(Action::await_change());
    }
    let ready = [LAUNCHED, REGISTERED, INITIALIZED]
        .iter()
        .all(|t| conditions::is_true(&status.conditions, t));
    if ready && !conditions::is_true(&status.conditions, READY) {
        conditions::set(
            &mut status.conditions,
            READY,
            "True",
            "Ready",
            "",
            nc.metadata.generation,
        );
    }
    write_status(&ctx, &nc, &before, &status).await?;
    publish_transitions(&ctx, &nc, &before, &status).await;
    Ok(match step? {
        Step::Wait(d) => Action::requeue(d),
        _ => Action::await_change(),
    })
}

/// One event per NodeClaim on its way up, when it becomes Ready: its
/// conditions already keep when each step happened, and an event per step
/// was up to three more writes per node for the API server to store. A
/// NodeClaim that stops short gets a warning from the step that gave up.
async fn publish_transitions(
    ctx: &Ctx,
    nc: &NodeClaim,
    before: &NodeClaimStatus,
    after: &NodeClaimStatus,
) {
    if let Some(note) = ready_note(nc, before, after) {
        ctx.events.normal(nc, READY, note).await;
    }
}

/// The Ready event's note, when this reconcile made the NodeClaim Ready.
fn ready_note(nc: &NodeClaim, before: &NodeClaimStatus, after: &NodeClaimStatus) -> Option<String> {
    if conditions::is_true(&before.conditions, READY)
        || !conditions::is_true(&after.conditions, READY)
    {
        return None;
    }
    let what: Vec<String> = [labels::INSTANCE_TYPE, labels::ZONE, labels::CAPACITY_TYPE]
        .iter()
        .filter_map(|k| nc.labels().get(*k).cloned())
        .chain(after.node_name.as_ref().map(|n| format!("node {n}")))
        .collect();
    let what = if what.is_empty() {
        String::new()
    } else {
        format!(" ({})", what.join(", "))
    };
    Some(format!(
        "Status condition transitioned, Type: Ready, Status: Unknown -> True, Reason: Ready{what}"
    ))
}

async fn steps(ctx: &Ctx, nc: &NodeClaim, status: &mut NodeClaimStatus) -> anyhow::Result<Step> {
    let mut step = launch::launch(ctx, nc, status).await?;
    let mut registered = None;
    if let Step::Continue = step {
        (step, registered) = registration::register(ctx, nc, status).await?;
    }
    if let Step::Continue = step {
        step = initialization::initialize(ctx, nc, status, registered).await?;
    }
    Ok(step)
}

/// Adds the termination finalizer (unless the NodeClaim is already going).
/// The provisioner creates NodeClaims with it; this covers any made otherwise.
async fn ensure_finalizer(ctx: &Ctx, nc: &NodeClaim) -> anyhow::Result<()> {
    if nc.finalizers().iter().any(|f| f == TERMINATION_FINALIZER) {
        return Ok(());
    }
    set_finalizer(ctx, nc, true).await
}

/// Removes the termination finalizer.
pub(crate) async fn remove_finalizer(ctx: &Ctx, nc: &NodeClaim) -> anyhow::Result<()> {
    set_finalizer(ctx, nc, false).await
}

/// Patches the finalizer list, which a merge patch replaces whole, on the
/// copy it was computed from: the stored one first, and on a conflict (the
/// store lagging, or another writer) a fresh read.
async fn set_finalizer(ctx: &Ctx, nc: &NodeClaim, present: bool) -> anyhow::Result<()> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let mut current = nc.clone();
    for _ in 0..5 {
        let Some(patch) = finalizer_patch(&current, present) else {
            return Ok(());
        };
        match api
            .patch(
                &nc.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&nc.name_any()).await? {
                Some(fresh) => current = fresh,
                None => return Ok(()),
            },
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            r => return Ok(r.map(|_| ())?),
        }
    }
    anyhow::bail!("nodeclaim {} kept changing", nc.name_any())
}

/// The merge patch that adds or removes the termination finalizer on `nc`
/// as read, other finalizers kept; `None` when there is nothing to do (a
/// NodeClaim being deleted gets none added).
fn finalizer_patch(nc: &NodeClaim, present: bool) -> Option<serde_json::Value> {
    let has = nc.finalizers().iter().any(|f| f == TERMINATION_FINALIZER);
    if has == present || (present && nc.metadata.deletion_timestamp.is_some()) {
        return None;
    }
    let mut finalizers: Vec<&str> = nc
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != TERMINATION_FINALIZER)
        .collect();
    if present {
        finalizers.push(TERMINATION_FINALIZER);
    }
    Some(serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": nc.resource_version()}
    }))
}

async fn write_status(
    ctx: &Ctx,
    nc: &NodeClaim,
    before: &NodeClaimStatus,
    after: &NodeClaimStatus,
) -> anyhow::Result<()> {
    let unchanged = conditions::same(&before.conditions, &after.conditions)
        && NodeClaimStatus {
            conditions: vec![],
            ..before.clone()
        } == NodeClaimStatus {
            conditions: vec![],
            ..after.clone()
        };
    if unchanged {
        return Ok(());
    }
    let patch = serde_json::json!({ "status": after });
    Api::<NodeClaim>::all(ctx.client.clone())
        .patch_status(
            &nc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    ctx.status_writes.record(nc, after);
    Ok(())
}

/// Deletes a NodeClaim (its finalizer then cleans up), ignoring one already gone.
pub async fn delete_node_claim(ctx: &Ctx, nc: &NodeClaim) -> anyhow::Result<()> {
    match Api::<NodeClaim>::all(ctx.client.clone())
        .delete(&nc.name_any(), &Default::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn the_finalizer_patch_keeps_other_finalizers_and_names_its_copy() {
        let nc: NodeClaim = fixtures::claim("a")
            .finalizers(&["example.com/keep", TERMINATION_FINALIZER])
            .build();
        let Some(removed) = finalizer_patch(&nc, false) else {
            panic!("the finalizer is there to remove");
        };
        assert_eq!(
            removed,
            serde_json::json!({"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "7"}}),
            "a conflict, not an overwrite, if the object changed since"
        );
        assert_eq!(finalizer_patch(&nc, true), None, "already there");
    }

    #[test]
    fn a_claim_being_deleted_gets_no_finalizer_added() {
        let bare: NodeClaim = fixtures::claim("a").finalizers(&[]).build();
        assert!(finalizer_patch(&bare, true).is_some());
        let going: NodeClaim = fixtures::claim("a").finalizers(&[]).deleting().build();
        assert_eq!(finalizer_patch(&going, true), None);
        assert_eq!(finalizer_patch(&going, false), None, "nothing to remove");
    }

    #[test]
    fn a_claim_gets_one_event_on_its_way_up_when_it_becomes_ready() {
        let nc: NodeClaim = fixtures::claim("a")
            .label(labels::INSTANCE_TYPE, "m-4x-amd64-linux")
            .label(labels::ZONE, "zone-a")
            .build();
        let status = |trues: &[&str]| {
            let mut s = NodeClaimStatus {
                node_name: Some("n1".into()),
                ..Default::default()
            };
            for t in [LAUNCHED, REGISTERED, INITIALIZED, READY] {
                let state = if trues.contains(&t) {
                    "True"
                } else {
                    "Unknown"
                };
                conditions::set(&mut s.conditions, t, state, t, "", Some(1));
            }
            s
        };
        let steps = [
            status(&[]),
            status(&[LAUNCHED]),
            status(&[LAUNCHED, REGISTERED]),
            status(&[LAUNCHED, REGISTERED, INITIALIZED, READY]),
            status(&[LAUNCHED, REGISTERED, INITIALIZED, READY]),
        ];
        let notes: Vec<String> = steps
            .windows(2)
            .filter_map(|w| ready_note(&nc, &w[0], &w[1]))
            .collect();
        assert_eq!(
            notes,
            [
                "Status condition transitioned, Type: Ready, Status: Unknown -> True, Reason: Ready (m-4x-amd64-linux, zone-a, node n1)"
            ]
        );
        // A Node up before its claim saw it: launch to Ready in one reconcile.
        assert!(ready_note(&nc, &steps[0], &steps[3]).is_some());
    }
}
