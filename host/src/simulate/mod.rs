//! `karpenter simulate`: Kubernetes manifests in, the provisioning plan out,
//! with instance types from the real plugins (offline: nothing is granted,
//! so plugins answer from their embedded catalogs).

pub mod manifests;

use anyhow::{Context, bail};
use karpenter_controller::crds::NodePool;
use karpenter_controller::records;
use karpenter_controller::snapshot;
use karpenter_runtime::{Registry, wit};
use manifests::Manifests;

pub struct Simulation {
    pub snapshot: engine::Snapshot,
    pub plan: engine::Plan,
    /// The pods' names in the order the manifests gave them.
    pub pod_count: usize,
}

/// Builds the engine's snapshot from manifests and plugins, and runs it.
pub async fn run(manifests: &Manifests, registry: &Registry) -> anyhow::Result<Simulation> {
    if manifests.node_pools.is_empty() {
        bail!("the manifests hold no NodePool (karpenter.sh/v1)");
    }
    let mut node_pools = Vec::new();
    for np in &manifests.node_pools {
        let types = instance_types(np, manifests, registry).await?;
        let catalog = snapshot::instance_types::catalog(&types).with_context(|| {
            format!(
                "nodepool {}",
                np.metadata.name.as_deref().unwrap_or_default()
            )
        })?;
        node_pools.push(snapshot::nodepools::node_pool(np, catalog)?);
    }
    let all_pods: Vec<karpenter_controller::slim::Pod> = manifests
        .pods
        .iter()
        .cloned()
        .map(karpenter_controller::slim::Pod::from)
        .collect();
    let mut converter = snapshot::pods::Pods::default();
    let mut nodes = Vec::new();
    for node in &manifests.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let bound: Vec<_> = all_pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name))
            .collect();
        nodes.push(snapshot::nodes::node(node, None, &bound, &mut converter)?);
    }
    let pending: Vec<_> = all_pods
        .iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()))
        .collect();
    let pods = pending
        .iter()
        .enumerate()
        .map(|(i, p)| converter.pod(p, i as i64))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let daemon_sets = manifests
        .daemon_sets
        .iter()
        .map(snapshot::pods::daemon_set)
        .collect::<anyhow::Result<_>>()?;
    let snapshot = engine::Snapshot {
        node_pools,
        nodes,
        daemon_sets,
        pods,
        options: engine::Options::default(),
    };
    let plan = engine::schedule(&snapshot);
    Ok(Simulation {
        pod_count: snapshot.pods.len(),
        snapshot,
        plan,
    })
}

async fn instance_types(
    np: &NodePool,
    manifests: &Manifests,
    registry: &Registry,
) -> anyhow::Result<Vec<wit::InstanceType>> {
    let name = np.metadata.name.as_deref().unwrap_or_default();
    let class_ref = &np.spec.template.spec.node_class_ref;
    let plugin = registry
        .for_node_class(&class_ref.group, &class_ref.kind)
        .with_context(|| {
            let loaded: Vec<String> = registry
                .plugins()
                .iter()
                .flat_map(|p| {
                    p.metadata
                        .node_classes
                        .iter()
                        .map(|k| format!("{}/{}", k.group, k.kind))
                })
                .collect();
            format!(
                "nodepool {name}: no plugin serves {}/{} (loaded: {})",
                class_ref.group,
                class_ref.kind,
                if loaded.is_empty() {
                    "none".into()
                } else {
                    loaded.join(", ")
                }
            )
        })?;
    let class = manifests
        .node_classes
        .iter()
        .find(|o| {
            o["kind"].as_str() == Some(class_ref.kind.as_str())
                && o["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.split('/').next() == Some(class_ref.group.as_str()))
                && o["metadata"]["name"].as_str() == Some(class_ref.name.as_str())
        })
        .with_context(|| {
            format!(
                "nodepool {name}: {} {:?} is not in the manifests",
                class_ref.kind, class_ref.name
            )
        })?;
    let class = records::node_class(class)?;
    let pool = records::node_pool(np)?;
    Ok(plugin.get_instance_types(&pool, &class).await?)
}
