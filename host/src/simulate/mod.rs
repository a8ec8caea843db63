//! `karpenter simulate`: a starting cluster (empty, or the live one) with
//! manifests applied on top, into the provisioning plan, and optionally the
//! disruption decisions that would follow, with what would change. Instance
//! types come from the real plugins (offline: nothing is granted, so
//! plugins answer from their embedded catalogs).

pub mod live;
pub mod manifests;
pub mod state;

use anyhow::{Context, bail};
use engine::disruption::DisruptionOptions;
use engine::whatif::{self, Diff, Settled};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_controller::crds::NodePool;
use karpenter_controller::records;
use karpenter_controller::snapshot::{self, cluster::Objects, disruption::Observed};
use karpenter_runtime::Registry;
use manifests::Manifests;
use serde::Serialize;
use state::State;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also decide disruption, again and again, until nothing more changes.
    pub disruption: bool,
    /// Unix seconds the decisions are taken at (expiry, budget schedules).
    pub now: i64,
    /// Leave out, with why, what the controller would leave out (a NodePool
    /// without its plugin or NodeClass, an object that does not convert),
    /// rather than fail: a live cluster is simulated as the controller sees it.
    pub as_controller: bool,
    /// Karpenter's `NodeOverlay` gate: the NodeOverlays change the catalogs.
    pub node_overlay: bool,
}

#[derive(Serialize)]
pub struct Simulation {
    /// The provisioner's decision for the pending pods.
    pub plan: engine::Plan,
    /// Pods the provisioner had to place.
    pub pod_count: usize,
    /// The nodes the plan's NodeClaims become, in its order.
    pub launched: Vec<String>,
    /// What disruption did after the plan was carried out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Settled>,
    pub diff: Diff,
    /// What was left out, with why (`Options::as_controller`).
    pub skipped: Vec<String>,
    /// NodeOverlays not applied, and why.
    pub overlays: Vec<String>,
}

/// Decides for `state`: provisioning, then, if asked, disruption.
pub async fn run(
    state: &State,
    registry: &Registry,
    options: Options,
) -> anyhow::Result<Simulation> {
    if state.node_pools.is_empty() {
        bail!("no NodePool (karpenter.sh/v1) in the cluster or the manifests");
    }
    let mut node_pools: Vec<Arc<NodePool>> = state.node_pools.clone();
    // Highest weight first, as the provisioner tries them.
    node_pools.sort_by(|a, b| {
        b.spec
            .weight
            .unwrap_or(0)
            .cmp(&a.spec.weight.unwrap_or(0))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let mut pools = Vec::new();
    let mut left_out = Vec::new();
    for np in node_pools {
        match engine_pool(&np, state, registry).await {
            Ok(pool) => pools.push((np, pool)),
            Err(e) if options.as_controller => left_out.push(format!("{e:#}")),
            Err(e) => return Err(e),
        }
    }
    let overlays = lay_overlays(state, &mut pools, options.node_overlay);
    let engine_pools: Vec<engine::NodePool> = pools.iter().map(|(_, p)| p.clone()).collect();
    let objects = || Objects {
        pods: &state.pods,
        nodes: &state.nodes,
        node_claims: &state.node_claims,
        daemon_sets: &state.daemon_sets,
    };
    let converted = snapshot::cluster::build(&objects(), &engine_pools);
    check(&converted.skipped, &options)?;
    left_out.extend(converted.skipped);
    let scheduling = engine::Snapshot {
        node_pools: engine_pools,
        nodes: converted.nodes,
        daemon_sets: converted.daemon_sets,
        pods: converted.pods,
        options: engine::Options::default(),
    };
    let plan = engine::schedule(&scheduling);
    let (mut cluster, skipped) = snapshot::disruption::build(&snapshot::disruption::Inputs {
        objects: objects(),
        pdbs: &state.pdbs,
        pools: &pools,
        observed: &Observed::default(),
        now: options.now,
        options: DisruptionOptions::default(),
    });
    check(&skipped, &options)?;
    let before = cluster.clone();
    let launched = whatif::provision(&mut cluster, &plan);
    let disruption = options.disruption.then(|| {
        // Each step removes a node or more; twice the nodes bounds any
        // sequence of replacements.
        let max_steps = 2 * cluster.nodes.len() + 10;
        whatif::settle(&mut cluster, max_steps)
    });
    Ok(Simulation {
        pod_count: scheduling.pods.len(),
        launched,
        diff: whatif::diff(&before, &cluster),
        plan,
        disruption,
        skipped: left_out,
        overlays,
    })
}

/// Lays the NodeOverlays over the pools' catalogs, as the controller does
/// with the gate on; returns what was not applied, and why.
fn lay_overlays(
    state: &State,
    pools: &mut [(Arc<NodePool>, engine::NodePool)],
    enabled: bool,
) -> Vec<String> {
    use karpenter_controller::node_overlays;
    if state.node_overlays.is_empty() {
        return Vec::new();
    }
    if !enabled {
        return vec![format!(
            "{} NodeOverlay(s) not applied: the NodeOverlay feature gate is off (--feature-gates NodeOverlay=true)",
            state.node_overlays.len()
        )];
    }
    let mut notes = Vec::new();
    let overlays: Vec<engine::overlay::NodeOverlay> = state
        .node_overlays
        .iter()
        .filter_map(|o| match node_overlays::read(o) {
            Ok(read) => Some(read),
            Err(why) => {
                let name = o.metadata.name.clone().unwrap_or_default();
                notes.push(format!("nodeoverlay {name}: {why}"));
                None
            }
        })
        .collect();
    let mut engine_pools: Vec<&mut engine::NodePool> = pools.iter_mut().map(|(_, p)| p).collect();
    let conflicts = node_overlays::lay_over(&mut engine_pools, &overlays);
    notes.extend(
        conflicts
            .into_iter()
            .map(|(name, why)| format!("nodeoverlay {name}: {why}")),
    );
    notes
}

fn check(skipped: &[String], options: &Options) -> anyhow::Result<()> {
    match skipped.first() {
        Some(why) if !options.as_controller => {
            bail!(
                "{} object(s) cannot be simulated; the first: {why}",
                skipped.len()
            )
        }
        _ => Ok(()),
    }
}

async fn engine_pool(
    np: &NodePool,
    state: &State,
    registry: &Registry,
) -> anyhow::Result<engine::NodePool> {
    let name = np.metadata.name.as_deref().unwrap_or_default();
    let types = instance_types(np, state, registry).await?;
    let catalog =
        snapshot::instance_types::catalog(types).with_context(|| format!("nodepool {name}"))?;
    snapshot::nodepools::node_pool(np, catalog)
}

/// Manifests alone, on an empty cluster: what the provisioner would launch.
pub async fn offline(manifests: &Manifests, registry: &Registry) -> anyhow::Result<Simulation> {
    let now = jiff::Timestamp::now();
    let mut state = State::default();
    state.apply(manifests, Time(now))?;
    let options = Options {
        now: now.as_second(),
        ..Options::default()
    };
    run(&state, registry, options).await
}

async fn instance_types(
    np: &NodePool,
    state: &State,
    registry: &Registry,
) -> anyhow::Result<karpenter_runtime::InstanceTypes> {
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
    let class = state
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
                "nodepool {name}: {} {:?} is not in the cluster or the manifests",
                class_ref.kind, class_ref.name
            )
        })?;
    let class = records::node_class(class)?;
    let pool = records::node_pool(np)?;
    Ok(plugin.get_instance_types(&pool, &class).await?)
}
