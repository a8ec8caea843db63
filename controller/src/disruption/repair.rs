//! Node repair (Karpenter's NodeRepair feature gate): the effects of
//! [`engine::disruption::repair`]. Reads each Node's conditions and its
//! plugin's repair policies, and deletes the NodeClaims the engine picks
//! (within the NodePools' `Unhealthy` budgets), so fresh nodes replace them.

use super::execute;
use crate::{Ctx, node_classes};
use engine::disruption::repair::{self, NodeCondition, RepairNode, RepairPolicy};
use karpenter_runtime::wit;
use kube::ResourceExt;
use std::collections::BTreeMap;
use vocabulary::labels;

pub async fn pass(ctx: &Ctx) -> anyhow::Result<()> {
    let now = jiff::Timestamp::now().as_second();
    let nodes = ctx.cluster.nodes.state();
    let claims = ctx.cluster.node_claims.state();
    let index = execute::ClaimIndex::new(&nodes, &claims);
    let mut policies: BTreeMap<(String, String), Vec<RepairPolicy>> = BTreeMap::new();
    let mut input = Vec::new();
    for node in &nodes {
        let Some(pool) = node.label(labels::NODE_POOL) else {
            continue;
        };
        let Some(claim) = index.of(&node.name_any()) else {
            continue;
        };
        let r = &claim.spec.node_class_ref;
        let key = (r.group.clone(), r.kind.clone());
        if !policies.contains_key(&key) {
            let (plugin, _) = node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
            let of_plugin = plugin.repair_policies().await?;
            policies.insert(key.clone(), of_plugin.iter().map(policy).collect());
        }
        input.push(RepairNode {
            name: node.name_any(),
            node_pool: pool.to_string(),
            conditions: conditions(node),
            policies: policies[&key].clone(),
            deleting: claim.metadata.deletion_timestamp.is_some(),
            initialized: node.label(labels::INITIALIZED) == Some("true"),
        });
    }
    let budgets: BTreeMap<String, Vec<engine::disruption::Budget>> = ctx
        .cluster
        .node_pools
        .state()
        .iter()
        .map(|np| (np.name_any(), crate::snapshot::disruption::budgets(np)))
        .collect();
    let plan = repair::repair(now, &input, &budgets);
    for (pool, node) in &plan.over_budget {
        tracing::info!(
            nodepool = %pool,
            node = %node,
            "node repair waits: no allowed disruptions for reason Unhealthy due to blocking budget"
        );
    }
    for held in &plan.held_back {
        tracing::warn!(
            nodepool = %held.node_pool,
            unhealthy = held.unhealthy,
            nodes = held.nodes,
            "node repair held back: more than 20% of the NodePool is unhealthy"
        );
    }
    for (pool, node) in plan.repair {
        let Some(claim) = index.of(&node) else {
            continue;
        };
        ctx.events
            .warning(
                claim.as_ref(),
                "NodeRepair",
                format!("Repairing NodeClaim: node {node} is unhealthy"),
            )
            .await;
        crate::lifecycle::delete_node_claim(ctx, claim).await?;
        ctx.metrics
            .disrupted
            .get_or_create(&crate::metrics::DisruptedLabels {
                nodepool: pool,
                reason: "Unhealthy".into(),
            })
            .inc();
    }
    Ok(())
}

/// A Node's conditions as the engine reads them.
pub(crate) fn conditions(node: &crate::slim::Node) -> Vec<NodeCondition> {
    node.conditions()
        .iter()
        .map(|c| NodeCondition {
            condition_type: c.type_.clone(),
            status: c.status.clone(),
            since: c.last_transition_time.as_ref().map(|t| t.0.as_second()),
        })
        .collect()
}

fn policy(p: &wit::RepairPolicy) -> RepairPolicy {
    RepairPolicy {
        condition_type: p.condition_type.clone(),
        status: p.condition_status.to_string(),
        toleration_seconds: i64::try_from(p.toleration_seconds).unwrap_or(i64::MAX),
    }
}
