//! Disruption: every pass (10 s by default) the engine decides which nodes
//! to remove or replace; this module carries that out. Expired NodeClaims are
//! deleted at once (forceful). A consolidation or emptiness command is
//! checked again after the validation delay and dropped if it no longer
//! holds (`engine::disruption::validate`); drift needs no second look.
//! `execute` then taints and creates the replacements, and the rest of the
//! command (waiting for them, deleting the candidates) runs beside the
//! passes, holding its candidates
//! (`in_flight`); a pass that started a command is followed at once by the
//! next. A taint no command holds (a crashed leader's) is removed at the
//! start of a pass. Nodes kept get Karpenter's DisruptionBlocked or Unconsolidatable
//! event; `repair` replaces unhealthy nodes when enabled.

pub(crate) mod execute;
mod in_flight;
mod observe;
pub mod repair;
mod stale_taints;

use super::Ctx;
use crate::snapshot;
use engine::disruption::{DisruptionPlan, KeepKind, Method};
use futures::StreamExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::{JoinHandle, JoinSet};

pub use in_flight::InFlight;
pub use observe::Observer;

#[derive(Debug, Clone)]
pub struct Settings {
    pub interval: Duration,
    /// Consolidation is checked twice this far apart, as Karpenter does, so
    /// a passing lull does not remove a node.
    pub validation: Duration,
    /// How long replacements may take to initialize before the command is
    /// abandoned and its candidates untainted.
    pub replacement_timeout: Duration,
    /// Node repair from the plugins' repair policies (Karpenter's NodeRepair
    /// feature gate; off by default).
    pub node_repair: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            interval: Duration::from_secs(10),
            validation: Duration::from_secs(15),
            replacement_timeout: Duration::from_secs(10 * 60),
            node_repair: false,
        }
    }
}

pub async fn run(ctx: Arc<Ctx>) {
    let mut observer = Observer::default();
    let mut reporting = None;
    // Dropped with this loop when leadership is lost, which aborts the
    // commands under way: a deposed leader deletes nothing more.
    let mut commands = JoinSet::new();
    let mut tick = tokio::time::interval(ctx.options.disruption.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut started = false;
    loop {
        // After a pass that started nothing, the next runs on the tick or as
        // soon as a command finishes: its nodes are gone from the store then
        // (`execute::finish` waits for that), and what they held back, such
        // as consolidation waiting on an uninitialized replacement, may move.
        if !started {
            tokio::select! {
                _ = tick.tick() => {}
                Some(done) = commands.join_next(), if !commands.is_empty() => ended(done),
            }
        }
        while let Some(done) = commands.try_join_next() {
            ended(done);
        }
        started = match pass(&ctx, &mut observer, &mut reporting).await {
            Ok(Some(command)) => {
                let ctx = ctx.clone();
                commands.spawn(async move { execute::finish(&ctx, command).await });
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = format!("{e:#}"), "disruption pass");
                false
            }
        };
        if ctx.options.disruption.node_repair
            && let Err(e) = repair::pass(&ctx).await
        {
            tracing::warn!(error = format!("{e:#}"), "node repair pass");
        }
    }
}

/// A finished command's failure, logged.
fn ended(done: Result<anyhow::Result<()>, tokio::task::JoinError>) {
    match done {
        Ok(Err(e)) => tracing::warn!(error = format!("{e:#}"), "disruption command"),
        Err(e) if e.is_panic() => {
            tracing::error!(error = %e, "disruption command panicked")
        }
        _ => {}
    }
}

/// A decision and the NodePools it was made with.
pub struct Decision {
    pub plan: DisruptionPlan,
    pub(crate) pools: Vec<super::provisioner::Pool>,
    pub elapsed: Duration,
}

/// What disruption decides on: the cluster as one snapshot. `karpenter
/// viewer` draws it.
pub async fn snapshot(
    ctx: &Ctx,
    observer: &mut Observer,
) -> engine::disruption::DisruptionSnapshot {
    snapshot_with_pools(ctx, observer).await.0
}

/// [`snapshot`], with the NodePools it was built from.
async fn snapshot_with_pools(
    ctx: &Ctx,
    observer: &mut Observer,
) -> (
    engine::disruption::DisruptionSnapshot,
    Vec<super::provisioner::Pool>,
) {
    let pools = super::provisioner::pools(ctx).await;
    let now = jiff::Timestamp::now().as_second();
    let nodes = ctx.cluster.nodes.state();
    let node_claims = ctx.cluster.node_claims.state();
    let daemon_sets = ctx.cluster.daemon_sets.state();
    let pods = ctx.cluster.pods.state();
    let pdbs = ctx.cluster.pdbs.state();
    observer.observe(ctx, &pods, &node_claims, now).await;
    let pairs: Vec<_> = pools
        .iter()
        .map(|p| (p.object.clone(), p.engine.clone()))
        .collect();
    let mut observed = observer.observed();
    observed.nominated = ctx.nominations.current(Instant::now());
    observed.disrupting = ctx.disrupting.names();
    let (snap, skipped) = snapshot::disruption::build(&snapshot::disruption::Inputs {
        objects: snapshot::cluster::Objects {
            pods: &pods,
            nodes: &nodes,
            node_claims: &node_claims,
            daemon_sets: &daemon_sets,
        },
        pdbs: &pdbs,
        pools: &pairs,
        observed: &observed,
        now,
        options: engine::disruption::DisruptionOptions {
            scheduling: ctx.options.engine,
            spot_to_spot_consolidation: ctx.options.spot_to_spot_consolidation,
        },
    });
    for why in &skipped {
        tracing::warn!(error = %why, "object left out of disruption");
    }
    let mut snap = snap;
    snap.pending_pods.extend(ctx.buffers.pods().iter().cloned());
    (snap, pools)
}

/// Snapshots the cluster and runs the engine. Changes nothing (`karpenter
/// explain node` uses it as is).
pub async fn decide(ctx: &Ctx, observer: &mut Observer) -> anyhow::Result<Decision> {
    let (snap, pools) = snapshot_with_pools(ctx, observer).await;
    let started = Instant::now();
    let plan = tokio::task::spawn_blocking(move || engine::disrupt(&snap)).await?;
    let elapsed = started.elapsed();
    ctx.metrics
        .disruption_duration
        .observe(elapsed.as_secs_f64());
    Ok(Decision {
        plan,
        pools,
        elapsed,
    })
}

/// Decides and starts this pass's command, if any; returns it to be
/// finished beside the passes.
async fn pass(
    ctx: &Ctx,
    observer: &mut Observer,
    reporting: &mut Option<JoinHandle<()>>,
) -> anyhow::Result<Option<execute::Started>> {
    stale_taints::remove(ctx).await;
    // Decide on the replacements commands just created, not without them.
    crate::provisioner::store_has_created_claims(ctx).await;
    let decision = {
        let _turn = ctx.whole_cluster_pass.lock().await;
        decide(ctx, observer).await?
    };
    ctx.metrics.allowed_disruptions.clear();
    for b in &decision.plan.budgets {
        ctx.metrics
            .allowed_disruptions
            .get_or_create(&crate::metrics::AllowedLabels {
                nodepool: b.node_pool.clone(),
                reason: b.reason.as_str().to_string(),
            })
            .set(b.allowed);
    }
    tracing::debug!(
        command = decision.plan.command.is_some(),
        expired = decision.plan.expired.len(),
        kept = decision.plan.kept.len(),
        decision_ms = decision.elapsed.as_millis() as u64,
        "disruption decided"
    );
    if !decision.plan.expired.is_empty() {
        let (nodes, claims) = (ctx.cluster.nodes.state(), ctx.cluster.node_claims.state());
        let index = execute::ClaimIndex::new(&nodes, &claims);
        for name in &decision.plan.expired {
            if let Some(claim) = index.of(name) {
                execute::expire(ctx, claim).await?;
            }
        }
    }
    report_kept(ctx, &decision.plan, reporting);
    let Some(command) = decision.plan.command.clone() else {
        return Ok(None);
    };
    tracing::info!(
        method = command.method.as_str(),
        reason = command.reason.as_str(),
        candidates = ?command.candidates,
        replacements = command.replacements.new_node_claims.len(),
        savings = command.savings,
        decision_ms = decision.elapsed.as_millis() as u64,
        "disruption command"
    );
    let (command, pools) = if command.method == Method::Drift {
        (command, decision.pools)
    } else {
        tokio::time::sleep(ctx.options.disruption.validation).await;
        let (snap, pools) = {
            let _turn = ctx.whole_cluster_pass.lock().await;
            snapshot_with_pools(ctx, observer).await
        };
        let decided = command.clone();
        match tokio::task::spawn_blocking(move || engine::disruption::validate(&snap, &decided))
            .await?
        {
            Ok(valid) => (valid, pools),
            Err(why) => {
                tracing::info!(
                    method = command.method.as_str(),
                    candidates = ?command.candidates,
                    why,
                    "the command no longer holds after validation; dropped"
                );
                return Ok(None);
            }
        }
    };
    let held = ctx.disrupting.hold(&command.candidates);
    execute::start(ctx, command, &pools, held).await.map(Some)
}

/// DisruptionBlocked and Unconsolidatable events on the NodeClaims kept,
/// each repeated only when its message changes. They are posted from a task
/// of their own, one report at a time, so the pass never waits for them:
/// when every node's reason changed at once, 1,000 events took the API
/// server ten minutes under load, and no pass ran meanwhile. A pass that
/// finds a report still running skips its own; the next one reports again.
fn report_kept(ctx: &Ctx, plan: &DisruptionPlan, reporting: &mut Option<JoinHandle<()>>) {
    if reporting.as_ref().is_some_and(|r| !r.is_finished()) {
        return;
    }
    let (nodes, claims) = (ctx.cluster.nodes.state(), ctx.cluster.node_claims.state());
    let index = execute::ClaimIndex::new(&nodes, &claims);
    let mut events = Vec::new();
    for kept in &plan.kept {
        let Some(reason) = kept.reasons.iter().find(|r| r.kind != KeepKind::Waiting) else {
            continue;
        };
        let Some(claim) = index.of(&kept.name) else {
            continue;
        };
        let event = match reason.kind {
            KeepKind::DisruptionBlocked => "DisruptionBlocked",
            KeepKind::Unconsolidatable => "Unconsolidatable",
            KeepKind::Waiting => continue,
        };
        events.push((claim.clone(), event, reason.message.clone()));
    }
    let publisher = ctx.events.clone();
    *reporting = Some(tokio::spawn(async move {
        futures::stream::iter(events)
            .for_each_concurrent(16, |(claim, event, message)| {
                let publisher = publisher.clone();
                async move {
                    publisher
                        .decision(claim.as_ref(), false, event, message)
                        .await
                }
            })
            .await;
    }));
}
