//! Interruption: the effects of [`engine::disruption::interruption`]. A
//! Node whose condition matches one of its plugin's interruption signals
//! (contract 0.1.3) is going away: its offering is marked unavailable, its
//! NodeClaim gets `karpenter.sh/nodeclaim-termination-timestamp` at the
//! notice's end and is deleted, so the node is tainted and drained at once
//! and its pods' replacements launch while the instance still runs.
//!
//! Nodes are looked at as they change (a condition appears on one node at a
//! time), and all of them on a slower timer.

use crate::crds::NodeClaim;
use crate::slim::Node;
use crate::{Ctx, lifecycle, node_classes};
use engine::disruption::interruption::{self, InterruptionSignal, WatchedNode};
use karpenter_runtime::{Plugin, wit};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use vocabulary::labels;

/// Every node is looked at this often, besides as it changes.
const SWEEP: Duration = Duration::from_secs(10);

pub async fn run(ctx: Arc<Ctx>) {
    let mut events = ctx.cluster.node_events.subscribe();
    let mut sweep = tokio::time::interval(SWEEP);
    let mut signals = Signals::default();
    let mut acted = Acted::default();
    loop {
        let only = tokio::select! {
            _ = sweep.tick() => None,
            e = events.recv() => match e {
                Ok(change) => {
                    let mut names = BTreeSet::from([change.name]);
                    while let Ok(more) = events.try_recv() {
                        names.insert(more.name);
                    }
                    Some(names)
                }
                Err(RecvError::Lagged(_)) => None,
                Err(RecvError::Closed) => return,
            },
        };
        if let Err(e) = pass(&ctx, &mut signals, &mut acted, only.as_ref()).await {
            tracing::warn!(error = format!("{e:#}"), "interruption");
        }
    }
}

/// Each loaded plugin's signals, asked once per plugin as loaded (a plugin
/// replaced by new code is asked again).
#[derive(Default)]
struct Signals(BTreeMap<String, (Arc<Plugin>, Vec<InterruptionSignal>)>);

impl Signals {
    async fn of(&mut self, plugin: &Arc<Plugin>) -> Vec<InterruptionSignal> {
        if let Some((p, s)) = self.0.get(&plugin.name)
            && Arc::ptr_eq(p, plugin)
        {
            return s.clone();
        }
        let signals: Vec<InterruptionSignal> = match plugin.interruption_signals().await {
            Ok(list) => list
                .into_iter()
                .filter(|s| !s.condition_type.is_empty() && !s.reason.is_empty())
                .map(|s| InterruptionSignal {
                    condition_type: s.condition_type,
                    status: s.condition_status.to_string(),
                    notice_seconds: i64::try_from(s.notice_seconds).unwrap_or(i64::MAX),
                    reason: s.reason,
                })
                .collect(),
            Err(e) => {
                // Asked again next time: a plugin's passing failure must
                // not leave its nodes unwatched.
                tracing::warn!(plugin = %plugin.name, error = %e, "interruption signals");
                return Vec::new();
            }
        };
        self.0
            .insert(plugin.name.clone(), (plugin.clone(), signals.clone()));
        signals
    }
}

/// The NodeClaims (by UID) this loop has interrupted, until the store shows
/// them deleted or gone: a node's next change may come before that.
#[derive(Default)]
struct Acted(BTreeSet<String>);

async fn pass(
    ctx: &Ctx,
    signals: &mut Signals,
    acted: &mut Acted,
    only: Option<&BTreeSet<String>>,
) -> anyhow::Result<()> {
    let nodes: Vec<Arc<Node>> = match only {
        Some(names) => names
            .iter()
            .filter_map(|n| ctx.cluster.nodes.get(&ObjectRef::new(n)))
            .collect(),
        None => ctx.cluster.nodes.state(),
    };
    let claims = ctx.cluster.node_claims.state();
    if only.is_none() {
        let live: BTreeSet<String> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        acted.0.retain(|uid| live.contains(uid));
    }
    let index = crate::disruption::execute::ClaimIndex::new(&nodes, &claims);
    let mut watched = Vec::new();
    let mut plugin_of: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
    for node in &nodes {
        if node.label(labels::NODE_POOL).is_none() {
            continue;
        }
        let Some(claim) = index.of(&node.name_any()) else {
            continue;
        };
        let r = &claim.spec.node_class_ref;
        let Ok((plugin, _)) = node_classes::resolve(&ctx.registry, &r.group, &r.kind) else {
            continue;
        };
        let of_plugin = signals.of(&plugin).await;
        if of_plugin.is_empty() {
            continue;
        }
        plugin_of.insert(node.name_any(), plugin.clone());
        watched.push(WatchedNode {
            name: node.name_any(),
            conditions: crate::disruption::repair::conditions(node),
            signals: of_plugin,
            deleting: claim.metadata.deletion_timestamp.is_some()
                || claim
                    .metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| acted.0.contains(u)),
        });
    }
    let now = jiff::Timestamp::now().as_second();
    for i in interruption::interrupted(now, &watched) {
        let Some(claim) = index.of(&i.node) else {
            continue;
        };
        let (Some(node), Some(plugin)) = (
            nodes.iter().find(|n| n.name_any() == i.node),
            plugin_of.get(&i.node),
        ) else {
            continue;
        };
        interrupt(ctx, plugin, node, claim, &i).await?;
        if let Some(uid) = &claim.metadata.uid {
            acted.0.insert(uid.clone());
        }
    }
    Ok(())
}

async fn interrupt(
    ctx: &Ctx,
    plugin: &Plugin,
    node: &Node,
    claim: &NodeClaim,
    i: &interruption::Interrupted,
) -> anyhow::Result<()> {
    let label = |k: &str| node.label(k).unwrap_or_default().to_string();
    let offering = wit::OfferingRef {
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: label(labels::CAPACITY_TYPE),
    };
    ctx.unavailable
        .mark(std::slice::from_ref(&offering), Instant::now());
    if let Err(e) = plugin
        .offering_interrupted(&offering, crate::unavailable::TTL.as_secs())
        .await
    {
        tracing::warn!(plugin = %plugin.name, error = %e, "offering-interrupted");
    }
    let deadline = jiff::Timestamp::from_second(i.deadline)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    let patch = serde_json::json!({
        "metadata": {"annotations": {labels::NODECLAIM_TERMINATION_TIMESTAMP: deadline}}
    });
    Api::<NodeClaim>::all(ctx.client.clone())
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let note = format!(
        "Interrupted: node {} has {} since {}; draining until {deadline}, {} {} in {} kept out of new launches",
        i.node,
        i.condition,
        jiff::Timestamp::from_second(i.since).unwrap_or_default(),
        offering.capacity_type,
        offering.instance_type,
        offering.zone,
    );
    tracing::warn!(node = %i.node, nodeclaim = %claim.name_any(), reason = %i.reason, deadline = %deadline, "interrupted");
    ctx.events.warning(claim, &i.reason, note.clone()).await;
    ctx.events.warning(node, &i.reason, note).await;
    lifecycle::delete_node_claim(ctx, claim).await?;
    let pool = label(labels::NODE_POOL);
    ctx.metrics
        .disrupted
        .get_or_create(&crate::metrics::DisruptedLabels {
            nodepool: pool,
            reason: i.reason.clone(),
        })
        .inc();
    ctx.metrics
        .interruptions
        .get_or_create(&crate::metrics::InterruptionLabels {
            message_type: i.reason.clone(),
        })
        .inc();
    Ok(())
}
