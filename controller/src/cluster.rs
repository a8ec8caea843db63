//! The controller's view of the cluster: one watcher per kind feeding an
//! in-memory store, and the signals other loops wake on.
//!
//! Pods and Nodes are stored as [`crate::slim`] types (only the fields
//! decisions read); every object loses its managed fields and last-applied
//! annotation, and a launched NodeClaim its list of candidate instance types.

use super::initial_list::InitialList;
use super::metrics::Metrics;
use super::uid_store::{self, UidStore};
use crate::crds::nodeclaim::Requirements;
use crate::crds::nodeclaim::conditions::INITIALIZED;
use crate::crds::nodepool::NodeSelectorRequirementWithMinValues;
use crate::crds::{NodeClaim, NodePool};
use crate::slim::{Node, Pod};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::broadcast;
use vocabulary::labels;

/// Read-only stores of everything the controller decides on.
#[derive(Clone)]
pub struct Cluster {
    /// Keyed by UID: there are tens of thousands.
    pub pods: UidStore<Pod>,
    pub nodes: Store<Node>,
    pub node_pools: Store<NodePool>,
    pub node_claims: Store<NodeClaim>,
    pub daemon_sets: Store<DaemonSet>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// A pod became provisionable, a NodeClaim went away or a NodePool
    /// changed: the provisioner should open a batch.
    pub provision: broadcast::Sender<()>,
    /// A Node changed or went away. Loops subscribe once they lead; a
    /// standby replica's watchers keep their stores warm without queueing
    /// anything.
    pub node_events: broadcast::Sender<NodeChange>,
    /// A NodeClaim changed or went away: the lifecycle reconciles it.
    pub node_claim_events: broadcast::Sender<ObjectRef<NodeClaim>>,
    /// How the watchers list: the NodeClass watchers, started later, list
    /// the same way.
    pub lists: InitialList,
}

/// Which Node changed: enough to look it, or its NodeClaim, up. Signals
/// carry names rather than objects because a broadcast channel keeps its
/// last [`SIGNAL_BUFFER`] messages alive, which at 1,000 Nodes would be
/// thousands of Node copies.
#[derive(Clone, Debug)]
pub struct NodeChange {
    pub name: String,
    pub provider_id: Option<String>,
}

/// Signals are hints (every loop also looks again on a timer, and one that
/// missed some looks at every object again), so a slow subscriber may skip
/// some rather than hold memory. Each channel allocates its slots up front,
/// so the buffer is no larger than a subscriber could fall behind: every
/// subscriber only hands a signal on.
const SIGNAL_BUFFER: usize = 1024;

impl Cluster {
    /// Starts every watcher on `client`; they run until the process ends.
    pub async fn start(client: &Client, metrics: Arc<Metrics>) -> Cluster {
        let lists = InitialList::probe(client).await;
        tracing::info!(?lists, "watchers start");
        let (provision_tx, _) = broadcast::channel(SIGNAL_BUFFER);
        let (nodes_tx, _) = broadcast::channel(SIGNAL_BUFFER);
        let (claims_tx, _) = broadcast::channel(SIGNAL_BUFFER);

        let tx = provision_tx.clone();
        let pods = spawn_by_uid(
            Api::<Pod>::all(client.clone()),
            lists,
            trim,
            move |e| match e {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    if crate::snapshot::cluster::is_provisionable(p) {
                        let _ = tx.send(());
                    }
                    observe_startup(&metrics, p, matches!(e, watcher::Event::InitApply(_)));
                }
                watcher::Event::Delete(p) => {
                    metrics.pod_gone(p.metadata.uid.as_deref().unwrap_or_default())
                }
                _ => {}
            },
        );
        let tx = nodes_tx.clone();
        let nodes_store = spawn(Api::<Node>::all(client.clone()), lists, trim, move |e| {
            if let watcher::Event::Apply(n) | watcher::Event::Delete(n) = e {
                let _ = tx.send(NodeChange {
                    name: n.name_any(),
                    provider_id: n.provider_id().map(str::to_string),
                });
            }
        });
        let tx = provision_tx.clone();
        let node_pools = spawn(
            Api::<NodePool>::all(client.clone()),
            lists,
            trim,
            move |e| {
                if let watcher::Event::Apply(_) = e {
                    let _ = tx.send(());
                }
            },
        );
        let (tx, changed) = (provision_tx.clone(), claims_tx.clone());
        let node_claims = spawn(
            Api::<NodeClaim>::all(client.clone()),
            lists,
            trim_node_claim,
            move |e| match e {
                watcher::Event::Apply(c) => {
                    let _ = changed.send(ObjectRef::from_obj(c));
                }
                watcher::Event::Delete(c) => {
                    let _ = tx.send(());
                    let _ = changed.send(ObjectRef::from_obj(c));
                }
                _ => {}
            },
        );
        let daemon_sets = spawn(Api::<DaemonSet>::all(client.clone()), lists, trim, |_| {});
        let pdbs = spawn(
            Api::<PodDisruptionBudget>::all(client.clone()),
            lists,
            trim,
            |_| {},
        );
        Cluster {
            pods,
            nodes: nodes_store,
            node_pools,
            node_claims,
            daemon_sets,
            pdbs,
            provision: provision_tx,
            node_events: nodes_tx,
            node_claim_events: claims_tx,
            lists,
        }
    }

    /// Waits until every store holds a full list.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.node_pools.wait_until_ready().await?;
        self.node_claims.wait_until_ready().await?;
        self.daemon_sets.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await?;
        Ok(())
    }

    /// The NodeClaim a Node belongs to, by providerID.
    pub fn node_claim_of(&self, node: &NodeChange) -> Option<ObjectRef<NodeClaim>> {
        let id = node.provider_id.as_deref()?;
        self.node_claims
            .find(|c| c.provider_id() == Some(id))
            .map(|c| ObjectRef::from_obj(&*c))
    }

    /// The NodeClaims whose next lifecycle step depends on their Node:
    /// not yet initialized, or terminating.
    pub fn claims_waiting_on_nodes(&self) -> Vec<ObjectRef<NodeClaim>> {
        self.node_claims
            .state()
            .iter()
            .filter(|c| waits_on_node(c))
            .map(|c| ObjectRef::from_obj(&**c))
            .collect()
    }

    /// The Node with this providerID.
    pub fn node_by_provider_id(&self, id: &str) -> Option<std::sync::Arc<Node>> {
        self.nodes.find(|n| n.provider_id() == Some(id))
    }
}

/// Whether a NodeClaim's next lifecycle step depends on its Node.
fn waits_on_node(c: &NodeClaim) -> bool {
    let initialized = c
        .status
        .as_ref()
        .is_some_and(|s| crate::conditions::is_true(&s.conditions, INITIALIZED));
    c.metadata.deletion_timestamp.is_some() || !initialized
}

pub(crate) fn spawn<K, T, F>(api: Api<K>, lists: InitialList, trim: T, mut on_event: F) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: FnMut(&mut K) + Send + 'static,
    F: FnMut(&watcher::Event<K>) + Send + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, lists.config())
        .default_backoff()
        .modify(trim)
        .reflect(writer);
    tokio::spawn(drive(stream, move |e| on_event(&e)));
    store
}

/// As [`spawn`], into a [`UidStore`].
fn spawn_by_uid<K, T, F>(api: Api<K>, lists: InitialList, trim: T, mut on_event: F) -> UidStore<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: FnMut(&mut K) + Send + 'static,
    F: FnMut(&watcher::Event<Arc<K>>) + Send + 'static,
{
    let (store, mut writer) = uid_store::store();
    let stream = watcher(api, lists.config()).default_backoff().modify(trim);
    tokio::spawn(drive(stream, move |e| on_event(&writer.apply(e))));
    store
}

async fn drive<K, S>(stream: S, mut on_event: impl FnMut(watcher::Event<K>))
where
    K: Resource<DynamicType = ()>,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(e) => on_event(e),
            Err(e) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying"),
        }
    }
}

/// Startup time is measured for pods seen starting, not for those already
/// running when the controller starts.
fn observe_startup(metrics: &Metrics, p: &Pod, initial: bool) {
    let uid = p.metadata.uid.as_deref().unwrap_or_default();
    let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    if !running {
        return;
    }
    let seconds = match (&p.metadata.creation_timestamp, initial) {
        (Some(t), false) => (jiff::Timestamp::now() - t.0)
            .total(jiff::Unit::Second)
            .unwrap_or(0.0),
        _ => -1.0,
    };
    if seconds >= 0.0 {
        metrics.pod_running(uid, seconds);
    } else {
        metrics.pod_seen(uid);
    }
}

/// Fields are set to `None` rather than cleared, and short lists shrunk:
/// a cleared or freshly parsed `Vec` keeps room for more, which across
/// every stored object adds up to megabytes.
pub fn trim<K: Resource>(o: &mut K) {
    let m = o.meta_mut();
    m.managed_fields = None;
    m.annotations = crate::slim::stored_annotations(m.annotations.take());
    shrink(&mut m.owner_references);
    shrink(&mut m.finalizers);
}

fn shrink<T>(list: &mut Option<Vec<T>>) {
    if let Some(l) = list {
        l.shrink_to_fit();
    }
}

/// A launched NodeClaim keeps only its own instance type in its
/// instance-type requirement: the hundreds of types it was created with
/// matter until launch, and are most of its size.
pub fn trim_node_claim(c: &mut NodeClaim) {
    trim(c);
    let launched = c
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INSTANCE_TYPE))
        .cloned();
    let Some(launched) = launched.filter(|_| c.provider_id().is_some()) else {
        return;
    };
    let is_long = |r: &NodeSelectorRequirementWithMinValues| {
        r.key == labels::INSTANCE_TYPE && r.operator == "In" && r.values.len() > 1
    };
    if !c.spec.requirements.iter().any(is_long) {
        return;
    }
    let mut requirements = Requirements::clone(&c.spec.requirements);
    for r in &mut requirements {
        if is_long(r) && r.values.contains(&launched) {
            r.values = vec![launched.clone()];
        }
    }
    c.spec.requirements = requirements.into();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn initialized(object: fixtures::Object) -> NodeClaim {
        let mut c: NodeClaim = object.build();
        let status = c.status.get_or_insert_with(Default::default);
        crate::conditions::set(
            &mut status.conditions,
            INITIALIZED,
            "True",
            "Initialized",
            "",
            None,
        );
        c
    }

    #[test]
    fn claims_on_their_way_up_or_down_wait_on_their_node() {
        assert!(waits_on_node(&fixtures::claim("launched").build()));
        assert!(!waits_on_node(&initialized(fixtures::claim("up"))));
        assert!(waits_on_node(&initialized(
            fixtures::claim("going").deleting()
        )));
    }
}
