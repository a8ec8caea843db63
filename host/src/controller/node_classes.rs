//! NodeClass objects of the kinds the loaded plugins serve. The kinds are
//! only known at run time (a new plugin brings its own), so they are read as
//! dynamic objects; there are few of them, so they are read when needed
//! rather than watched.

use crate::records;
use anyhow::Context;
use karpenter_runtime::{Plugin, Registry, wit};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use std::sync::Arc;

/// The API of one NodeClass kind that `plugin` serves.
pub fn api(client: &Client, kind: &wit::NodeClassKind) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &kind.plural);
    Api::all_with(client.clone(), &resource)
}

/// The plugin serving `reference` and the kind's description.
pub fn resolve(
    registry: &Registry,
    group: &str,
    kind: &str,
) -> anyhow::Result<(Arc<Plugin>, wit::NodeClassKind)> {
    let plugin = registry
        .for_node_class(group, kind)
        .with_context(|| format!("no loaded plugin serves {group}/{kind}"))?;
    let description = plugin
        .metadata
        .node_classes
        .iter()
        .find(|k| k.group == group && k.kind == kind)
        .cloned()
        .with_context(|| format!("plugin {} does not describe {kind}", plugin.name))?;
    Ok((plugin, description))
}

/// One NodeClass as a plugin receives it; `None` when it does not exist.
pub async fn get(
    client: &Client,
    kind: &wit::NodeClassKind,
    name: &str,
) -> anyhow::Result<Option<(DynamicObject, wit::NodeClass)>> {
    let Some(object) = api(client, kind)
        .get_opt(name)
        .await
        .with_context(|| format!("reading {} {name}", kind.kind))?
    else {
        return Ok(None);
    };
    let json = serde_json::to_value(&object)?;
    Ok(Some((object, records::node_class(&json)?)))
}

/// Every NodeClass of the kinds `plugin` serves; an error when any kind
/// could not be listed.
pub async fn list_of(
    client: &Client,
    plugin: &Plugin,
) -> anyhow::Result<Vec<(wit::NodeClassKind, DynamicObject)>> {
    let mut out = Vec::new();
    for kind in &plugin.metadata.node_classes {
        let list = api(client, kind)
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {} of plugin {}", kind.plural, plugin.name))?;
        out.extend(list.items.into_iter().map(|o| (kind.clone(), o)));
    }
    Ok(out)
}

/// Whether a NodeClass's status says Ready=True.
pub fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
