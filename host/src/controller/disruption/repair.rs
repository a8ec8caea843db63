//! Node repair (Karpenter's NodeRepair feature gate): a Node whose condition
//! matches one of its plugin's repair policies for longer than the policy
//! tolerates has its NodeClaim deleted, so a fresh node replaces it. Never
//! while more than 20% of the NodePool's nodes are unhealthy: then the
//! trouble is not the nodes, and replacing them all would make it worse.

use super::execute;
use crate::controller::{Ctx, node_classes};
use crate::slim::Node;
use karpenter_runtime::wit;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use vocabulary::labels;

/// At most this fraction of a NodePool may be unhealthy for repair to act.
const MAX_UNHEALTHY_FRACTION: f64 = 0.2;

pub async fn pass(ctx: &Ctx) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now();
    let nodes = ctx.cluster.nodes.state();
    let claims = ctx.cluster.node_claims.state();
    let index = execute::ClaimIndex::new(&nodes, &claims);
    let mut policies: BTreeMap<(String, String), Vec<wit::RepairPolicy>> = BTreeMap::new();
    // NodePool to (nodes, unhealthy ones).
    let mut pools: BTreeMap<String, (usize, Vec<Arc<Node>>)> = BTreeMap::new();
    for node in &nodes {
        let Some(pool) = node.label(labels::NODE_POOL).map(str::to_string) else {
            continue;
        };
        let Some(claim) = index.of(&node.name_any()) else {
            continue;
        };
        let r = &claim.spec.node_class_ref;
        let key = (r.group.clone(), r.kind.clone());
        if !policies.contains_key(&key) {
            let (plugin, _) = node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
            policies.insert(key.clone(), plugin.repair_policies().await?);
        }
        let entry = pools.entry(pool).or_default();
        entry.0 += 1;
        if unhealthy(node, &policies[&key], now) {
            entry.1.push(node.clone());
        }
    }
    for (pool, (total, unhealthy)) in pools {
        if unhealthy.is_empty() {
            continue;
        }
        if unhealthy.len() as f64 > total as f64 * MAX_UNHEALTHY_FRACTION {
            tracing::warn!(
                nodepool = %pool,
                unhealthy = unhealthy.len(),
                total,
                "node repair held back: more than 20% of the NodePool is unhealthy"
            );
            continue;
        }
        for node in unhealthy {
            if let Some(claim) = index.of(&node.name_any())
                && claim.metadata.deletion_timestamp.is_none()
            {
                ctx.events
                    .warning(
                        claim.as_ref(),
                        "NodeRepair",
                        format!("Repairing NodeClaim: node {} is unhealthy", node.name_any()),
                    )
                    .await;
                crate::controller::lifecycle::delete_node_claim(ctx, claim).await?;
                ctx.metrics
                    .disrupted
                    .get_or_create(&crate::controller::metrics::DisruptedLabels {
                        nodepool: pool.clone(),
                        reason: "Unhealthy".into(),
                    })
                    .inc();
            }
        }
    }
    Ok(())
}

/// Whether a condition of the Node has matched a policy for longer than it
/// tolerates.
fn unhealthy(node: &Node, policies: &[wit::RepairPolicy], now: jiff::Timestamp) -> bool {
    for c in node.conditions() {
        for p in policies {
            let status = match p.condition_status {
                wit::ConditionStatus::True => "True",
                wit::ConditionStatus::False => "False",
                wit::ConditionStatus::Unknown => "Unknown",
            };
            if c.type_ != p.condition_type || c.status != status {
                continue;
            }
            let since = c
                .last_transition_time
                .as_ref()
                .map(|t| (now - t.0).total(jiff::Unit::Second).unwrap_or(0.0))
                .unwrap_or(0.0);
            if since >= p.toleration_seconds as f64 {
                return true;
            }
        }
    }
    false
}
