//! NodeClass objects of the kinds the loaded plugins serve, watched. The
//! kinds are only known at run time (a new plugin brings its own), so each
//! is a dynamic reflector, started the first time its kind is asked for;
//! every launch, batch and status pass then reads the same store instead of
//! the API server.

use super::initial_list::InitialList;
use crate::records;
use anyhow::Context;
use futures::{FutureExt, StreamExt};
use karpenter_runtime::{Plugin, Registry, wit};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The API of one NodeClass kind.
pub fn api(client: &Client, kind: &wit::NodeClassKind) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &api_resource(kind))
}

fn api_resource(kind: &wit::NodeClassKind) -> ApiResource {
    let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
    ApiResource::from_gvk_with_plural(&gvk, &kind.plural)
}

/// The plugin serving `group`/`kind` and the kind's description.
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

/// A NodeClass as the controller holds it and as its plugin receives it.
pub type Found = (Arc<DynamicObject>, wit::NodeClass);

/// A NodeClass kind as its store is keyed: group, version, kind, plural.
type KindKey = (String, String, String, String);

/// One watched store per NodeClass kind.
#[derive(Clone)]
pub struct NodeClasses {
    client: Client,
    lists: InitialList,
    stores: Arc<Mutex<HashMap<KindKey, Store<DynamicObject>>>>,
}

impl NodeClasses {
    pub fn new(client: Client, lists: InitialList) -> NodeClasses {
        NodeClasses {
            client,
            lists,
            stores: Arc::default(),
        }
    }

    /// Starts watching every kind the registry's plugins serve.
    pub fn watch(&self, registry: &Registry) {
        for plugin in registry.plugins() {
            for kind in &plugin.metadata.node_classes {
                self.store(kind);
            }
        }
    }

    /// Waits, at most [`LIST_WAIT`], until every kind watched so far holds a
    /// full list, so the first batch reads its NodeClasses from the stores
    /// rather than asking the API server once per NodePool. A kind whose CRD
    /// is missing is not waited for past that: its reads go to the API server.
    pub async fn wait_listed(&self) {
        let stores: Vec<(KindKey, Store<DynamicObject>)> = self
            .stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let all = futures::future::join_all(stores.iter().map(|(_, s)| s.wait_until_ready()));
        if tokio::time::timeout(LIST_WAIT, all).await.is_err() {
            let unlisted: Vec<&str> = stores
                .iter()
                .filter(|(_, s)| !listed(s))
                .map(|(k, _)| k.3.as_str())
                .collect();
            tracing::warn!(kinds = ?unlisted, "NodeClasses not listed yet; reading them from the API server");
        }
    }

    /// The store of `kind`, its watcher started if this is the first ask.
    fn store(&self, kind: &wit::NodeClassKind) -> Store<DynamicObject> {
        let key: KindKey = (
            kind.group.clone(),
            kind.version.clone(),
            kind.kind.clone(),
            kind.plural.clone(),
        );
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(store) = stores.get(&key) {
            return store.clone();
        }
        let resource = api_resource(kind);
        let writer = Writer::new(resource.clone());
        let store = writer.as_reader();
        let stream = watcher(
            Api::<DynamicObject>::all_with(self.client.clone(), &resource),
            self.lists.config(),
        )
        .default_backoff()
        .reflect(writer);
        let name = kind.kind.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Err(e) = event {
                    tracing::warn!(kind = %name, error = %e, "NodeClass watch failed; retrying");
                }
            }
        });
        stores.insert(key, store.clone());
        store
    }

    /// One NodeClass; `None` when it does not exist. Until its kind's store
    /// holds a full list (the first ask, or a kind whose CRD is missing),
    /// reads the API server instead.
    pub async fn get(
        &self,
        kind: &wit::NodeClassKind,
        name: &str,
    ) -> anyhow::Result<Option<Found>> {
        let store = self.store(kind);
        let object = if listed(&store) {
            store.get(&ObjectRef::new_with(name, api_resource(kind)))
        } else {
            api(&self.client, kind)
                .get_opt(name)
                .await
                .with_context(|| format!("reading {} {name}", kind.kind))?
                .map(Arc::new)
        };
        let Some(object) = object else {
            return Ok(None);
        };
        let class = records::node_class(&serde_json::to_value(&*object)?)?;
        Ok(Some((object, class)))
    }

    /// Every NodeClass of the kinds `plugin` serves; an error when any
    /// kind's store holds no full list within [`LIST_WAIT`].
    pub async fn list_of(
        &self,
        plugin: &Plugin,
    ) -> anyhow::Result<Vec<(wit::NodeClassKind, Arc<DynamicObject>)>> {
        let mut out = Vec::new();
        for kind in &plugin.metadata.node_classes {
            let store = self.store(kind);
            let waited = tokio::time::timeout(LIST_WAIT, store.wait_until_ready()).await;
            anyhow::ensure!(
                matches!(waited, Ok(Ok(()))),
                "{} of plugin {} could not be listed",
                kind.plural,
                plugin.name
            );
            out.extend(store.state().into_iter().map(|o| (kind.clone(), o)));
        }
        Ok(out)
    }
}

/// How long a pass that needs every NodeClass waits for a first list.
const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the store holds a full list (and so answers for absent objects).
fn listed(store: &Store<DynamicObject>) -> bool {
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// Whether a NodeClass's status says Ready=True.
pub fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
