//! What disruption must remember between passes because no object records
//! it: when each node's pods last changed (consolidateAfter counts from
//! there), and the provider's drift verdicts, asked of the plugin at most
//! once per NodeClaim every few minutes.

use crate::crds::NodeClaim;
use crate::crds::nodeclaim::conditions;
use crate::records;
use crate::slim::Pod;
use crate::snapshot::disruption::Observed;
use crate::{Ctx, node_classes};
use kube::ResourceExt;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// How long a provider's drift verdict stands before it is asked again.
const DRIFT_RECHECK_SECONDS: i64 = 300;

#[derive(Default)]
pub struct Observer {
    /// Node name to (fingerprint of its pods, when that last changed).
    pods: BTreeMap<String, (u64, i64)>,
    /// NodeClaim name to (when asked, the verdict).
    drift: BTreeMap<String, (i64, Option<String>)>,
    drifted_since: BTreeMap<String, i64>,
}

impl Observer {
    pub async fn observe(
        &mut self,
        ctx: &Ctx,
        pods: &[Arc<Pod>],
        node_claims: &[Arc<NodeClaim>],
        now: i64,
    ) {
        self.observe_pods(pods, now);
        self.observe_drift(ctx, node_claims, now).await;
    }

    fn observe_pods(&mut self, pods: &[Arc<Pod>], now: i64) {
        let mut by_node: BTreeMap<&str, (Vec<&str>, i64)> = BTreeMap::new();
        for p in pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            if crate::snapshot::cluster::is_terminal(p) {
                continue;
            }
            let e = by_node.entry(node).or_default();
            e.0.push(p.metadata.uid.as_deref().unwrap_or_default());
            let started = p
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second())
                .unwrap_or_default();
            e.1 = e.1.max(started);
        }
        let mut seen = BTreeSet::new();
        for (node, (mut uids, latest_start)) in by_node {
            uids.sort_unstable();
            let mut h = DefaultHasher::new();
            uids.hash(&mut h);
            let print = h.finish();
            seen.insert(node.to_string());
            match self.pods.get_mut(node) {
                Some((old, at)) if *old != print => {
                    *old = print;
                    *at = now;
                }
                Some(_) => {}
                // First sight: the newest pod's start is the best record.
                None => {
                    self.pods.insert(node.to_string(), (print, latest_start));
                }
            }
        }
        // A node whose last pod left changed just now.
        for (node, (print, at)) in self.pods.iter_mut() {
            if !seen.contains(node) && *print != 0 {
                *print = 0;
                *at = now;
            }
        }
    }

    async fn observe_drift(&mut self, ctx: &Ctx, node_claims: &[Arc<NodeClaim>], now: i64) {
        let live: BTreeSet<String> = node_claims.iter().map(|c| c.name_any()).collect();
        self.drift.retain(|n, _| live.contains(n));
        self.drifted_since.retain(|n, _| live.contains(n));
        self.pods
            .retain(|_, (print, at)| *print != 0 || now - *at < 3600);
        for c in node_claims {
            if !c.is_true(conditions::INITIALIZED) || c.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = c.name_any();
            if self
                .drift
                .get(&name)
                .is_some_and(|(at, _)| now - at < DRIFT_RECHECK_SECONDS)
            {
                continue;
            }
            match provider_drift(ctx, c).await {
                Ok(verdict) => {
                    if verdict.is_some() {
                        self.drifted_since.entry(name.clone()).or_insert(now);
                    } else {
                        self.drifted_since.remove(&name);
                    }
                    self.drift.insert(name, (now, verdict));
                }
                Err(e) => {
                    tracing::debug!(nodeclaim = %name, error = format!("{e:#}"), "drift check")
                }
            }
        }
    }

    pub fn observed(&self) -> Observed {
        Observed {
            last_pod_event: self
                .pods
                .iter()
                .filter(|(_, (_, at))| *at > 0)
                .map(|(n, (_, at))| (n.clone(), *at))
                .collect(),
            drifted_since: self.drifted_since.clone(),
            provider_drift: self
                .drift
                .iter()
                .filter_map(|(n, (_, v))| Some((n.clone(), v.clone()?)))
                .collect(),
            nominated: BTreeSet::new(),
            disrupting: BTreeSet::new(),
        }
    }
}

async fn provider_drift(ctx: &Ctx, c: &NodeClaim) -> anyhow::Result<Option<String>> {
    let r = &c.spec.node_class_ref;
    let (plugin, kind) = node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
    let Some((_, class)) = ctx.node_classes.get(&kind, &r.name).await? else {
        return Ok(None);
    };
    let claim = records::node_claim(c, None)?;
    Ok(plugin.is_drifted(&claim, &class).await?)
}
