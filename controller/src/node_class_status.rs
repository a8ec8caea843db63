//! NodeClass status from its plugin's validation: the plugin says whether
//! the NodeClass is Ready and resolves fields (images, versions); the host
//! writes them. A plugin that fails the call is reported on the NodeClass
//! rather than taking anything else down.

use super::{Ctx, node_classes};
use crate::records;
use karpenter_runtime::{Plugin, wit};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::api::{Patch, PatchParams};
use std::sync::Arc;
use std::time::Duration;

pub const INTERVAL: Duration = Duration::from_secs(10);

pub async fn run(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(INTERVAL);
    loop {
        tick.tick().await;
        for plugin in ctx.registry.plugins() {
            match ctx.node_classes.list_of(&plugin).await {
                // Every NodeClass was shown to the plugin: garbage collection
                // may now trust what it says exists.
                Ok(objects) => {
                    if validate_all(&ctx, &plugin, objects).await {
                        plugin.mark_node_classes_seen();
                    }
                }
                Err(e) => tracing::warn!(error = format!("{e:#}"), "cannot list NodeClasses"),
            }
        }
    }
}

/// Validates each NodeClass and writes its status; whether the plugin
/// answered for every one (a typed error is an answer, a trap is not).
async fn validate_all(
    ctx: &Ctx,
    plugin: &Plugin,
    objects: Vec<(wit::NodeClassKind, Arc<DynamicObject>)>,
) -> bool {
    let mut answered = true;
    for (kind, object) in objects {
        let name = object.name_any();
        let json = match serde_json::to_value(&*object) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(error = %e, "NodeClass as JSON");
                continue;
            }
        };
        let status = match records::node_class(&json) {
            Ok(class) => match plugin.validate_node_class(&class).await {
                Ok(s) => status_json(&s, object.metadata.generation),
                Err(e) => {
                    answered &= e.provider_error().is_some();
                    failed(&e.to_string(), object.metadata.generation)
                }
            },
            Err(e) => failed(&format!("{e:#}"), object.metadata.generation),
        };
        let merged = merge_times(&json["status"], status);
        if same(&json["status"], &merged) {
            continue;
        }
        let r = node_classes::api(&ctx.client, &kind)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": merged})),
            )
            .await;
        if let Err(e) = r {
            tracing::warn!(kind = %kind.kind, name = %name, error = %e, "NodeClass status");
        }
    }
    answered
}

fn status_json(s: &wit::NodeClassStatus, generation: Option<i64>) -> serde_json::Value {
    let mut status: serde_json::Value =
        serde_json::from_str(&s.resolved).unwrap_or_else(|_| serde_json::json!({}));
    if !status.is_object() {
        status = serde_json::json!({});
    }
    let now = jiff::Timestamp::now().to_string();
    status["conditions"] = s
        .conditions
        .iter()
        .map(|c| {
            serde_json::json!({
                "type": c.type_,
                "status": c.status.to_string(),
                "reason": if c.reason.is_empty() { c.type_.clone() } else { c.reason.clone() },
                "message": c.message,
                "lastTransitionTime": now,
                "observedGeneration": generation,
            })
        })
        .collect();
    status
}

fn failed(message: &str, generation: Option<i64>) -> serde_json::Value {
    serde_json::json!({"conditions": [{
        "type": "Ready",
        "status": "False",
        "reason": "ProviderFailed",
        "message": message,
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
        "observedGeneration": generation,
    }]})
}

/// Keeps a condition's transition time while its status stays the same.
fn merge_times(old: &serde_json::Value, mut new: serde_json::Value) -> serde_json::Value {
    if let Some(conds) = new["conditions"].as_array_mut() {
        for c in conds {
            let prior = old["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o["type"] == c["type"]);
            if let Some(p) = prior.filter(|p| p["status"] == c["status"]) {
                c["lastTransitionTime"] = p["lastTransitionTime"].clone();
            }
        }
    }
    new
}

fn same(old: &serde_json::Value, new: &serde_json::Value) -> bool {
    old == new
}
