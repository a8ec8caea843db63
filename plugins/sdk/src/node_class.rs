//! The NodeClass a call brings, checked to be of the kind the provider
//! serves before anything reads its spec.

use crate::bindings::karpenter::provider::types::{Error, NodeClass};
use crate::errors::node_class_not_ready;

/// Refuses a NodeClass of another group or kind than `group`/`kind` with
/// node-class-not-ready. The host routes each NodeClass to the plugin that
/// serves its kind, so this catches a misrouted or hand-made call; one that
/// names no apiVersion and kind (`karpenter plugin call` without
/// `--node-class`) is taken as the provider's own.
pub fn ensure_kind(class: &NodeClass, group: &str, kind: &str) -> Result<(), Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TypeMeta {
        #[serde(default)]
        api_version: String,
        #[serde(default)]
        kind: String,
    }
    let meta: TypeMeta = serde_json::from_str(&class.json)
        .map_err(|e| node_class_not_ready(format!("NodeClass {}: {e}", class.name)))?;
    let their_group = meta.api_version.split_once('/').map_or("", |(g, _)| g);
    if (meta.kind.is_empty() && meta.api_version.is_empty())
        || (meta.kind == kind && their_group == group)
    {
        return Ok(());
    }
    Err(node_class_not_ready(format!(
        "NodeClass {} is a {} ({}); this provider serves {kind} ({group})",
        class.name, meta.kind, meta.api_version
    )))
}
