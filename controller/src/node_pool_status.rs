//! NodePool status: the resources and number of nodes it holds, and Ready
//! when its NodeClass is; plus the usage and limit metrics.

use super::{Ctx, conditions, node_classes};
use crate::crds::{NodePool, nodepool::NodePoolStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const INTERVAL: Duration = Duration::from_secs(5);

pub async fn run(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(INTERVAL);
    loop {
        tick.tick().await;
        for np in ctx.cluster.node_pools.state() {
            if let Err(e) = update(&ctx, &np).await {
                tracing::warn!(nodepool = %np.name_any(), error = format!("{e:#}"), "nodepool status");
            }
        }
    }
}

async fn update(ctx: &Ctx, np: &NodePool) -> anyhow::Result<()> {
    let name = np.name_any();
    let mut totals: BTreeMap<String, i64> = BTreeMap::new();
    let mut nodes = 0i64;
    for c in ctx.cluster.node_claims.state() {
        if c.node_pool() != Some(name.as_str()) {
            continue;
        }
        nodes += 1;
        for (k, q) in c.status.iter().flat_map(|s| &s.capacity) {
            if let Ok(v) = engine::parse_resource(k, &q.0) {
                *totals.entry(k.clone()).or_default() += v;
            }
        }
    }
    for (k, v) in &totals {
        let value = super::metrics::Metrics::in_metric_units(k, *v);
        ctx.metrics
            .usage
            .get_or_create(&super::metrics::UsageLabels {
                nodepool: name.clone(),
                resource_type: k.clone(),
            })
            .set(value);
    }
    for (k, q) in np.spec.limits.iter().flatten() {
        if let Ok(v) = engine::parse_resource(k, &q.0) {
            let value = super::metrics::Metrics::in_metric_units(k, v);
            ctx.metrics
                .limit
                .get_or_create(&super::metrics::UsageLabels {
                    nodepool: name.clone(),
                    resource_type: k.clone(),
                })
                .set(value);
        }
    }

    let before = np.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let mut resources: BTreeMap<String, Quantity> = totals
        .iter()
        .map(|(k, v)| (k.clone(), Quantity(engine::format_resource(k, *v))))
        .collect();
    resources.insert("nodes".into(), Quantity(nodes.to_string()));
    status.resources = Some(resources);
    status.nodes = Some(nodes);

    let r = &np.spec.template.spec.node_class_ref;
    let generation = np.metadata.generation;
    let (class_status, reason, message) =
        match node_classes::resolve(&ctx.registry, &r.group, &r.kind) {
            Err(e) => ("False", "NodeClassNotFound", format!("{e:#}")),
            Ok((_, kind)) => match ctx.node_classes.get(&kind, &r.name).await? {
                None => (
                    "False",
                    "NodeClassNotFound",
                    format!("{} {} not found", r.kind, r.name),
                ),
                Some((o, _)) if node_classes::is_ready(&o) => {
                    ("True", "NodeClassReady", String::new())
                }
                Some(_) => (
                    "False",
                    "NodeClassNotReady",
                    format!("{} {} is not ready", r.kind, r.name),
                ),
            },
        };
    conditions::set(
        &mut status.conditions,
        "ValidationSucceeded",
        "True",
        "ValidationSucceeded",
        "",
        generation,
    );
    conditions::set(
        &mut status.conditions,
        "NodeClassReady",
        class_status,
        reason,
        &message,
        generation,
    );
    conditions::set(
        &mut status.conditions,
        "Ready",
        class_status,
        if class_status == "True" {
            "Ready"
        } else {
            reason
        },
        &message,
        generation,
    );
    if same(&before, &status) {
        return Ok(());
    }
    Api::<NodePool>::all(ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": status})),
        )
        .await?;
    Ok(())
}

fn same(a: &NodePoolStatus, b: &NodePoolStatus) -> bool {
    a.resources == b.resources
        && a.nodes == b.nodes
        && conditions::same(&a.conditions, &b.conditions)
}
