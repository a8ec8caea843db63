//! The live cluster as a simulation's starting point, read through the
//! controller's own watchers (the same trimmed stores its loops decide on).
//! Only reads: the controller's read permissions are enough.

use super::state::State;
use anyhow::Context;
use karpenter_controller::crds::NodeOverlay;
use karpenter_controller::{self as controller, Ctx, cluster::Cluster, metrics::Metrics};
use karpenter_runtime::Registry;
use std::sync::Arc;

pub async fn read(client: kube::Client, registry: Arc<Registry>) -> anyhow::Result<State> {
    let metrics = Arc::new(Metrics::default());
    let cluster = Cluster::start(&client, metrics.clone()).await;
    cluster
        .wait_ready()
        .await
        .context("listing the cluster's objects")?;
    let ctx = Ctx::new(
        client,
        registry.clone(),
        cluster,
        metrics,
        controller::Options::default(),
    );
    let mut node_classes = Vec::new();
    for plugin in registry.plugins() {
        for (kind, object) in ctx.node_classes.list_of(&plugin).await? {
            let mut value = serde_json::to_value(&*object)?;
            value["apiVersion"] = format!("{}/{}", kind.group, kind.version).into();
            value["kind"] = kind.kind.clone().into();
            node_classes.push(value);
        }
    }
    // Listed whatever the gate: the simulation decides whether they apply.
    let node_overlays = match kube::Api::<NodeOverlay>::all(ctx.client.clone())
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items.into_iter().map(Arc::new).collect(),
        // Without the CRD, or without the right to read it, there are none.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 403 => Vec::new(),
        Err(e) => return Err(e).context("listing NodeOverlays"),
    };
    let c = &ctx.cluster;
    Ok(State {
        node_overlays,
        pods: c.pods.state(),
        nodes: c.nodes.state(),
        node_claims: c.node_claims.state(),
        node_pools: c.node_pools.state(),
        node_classes,
        daemon_sets: c.daemon_sets.state(),
        pdbs: c.pdbs.state(),
    })
}
