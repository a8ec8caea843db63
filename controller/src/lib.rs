//! The controller: the imperative shell that carries out the engine's
//! decisions against a live cluster.
//!
//! Map: `crds` are the karpenter.sh/v1 API; `slim` the trimmed Pods and Nodes
//! the watches keep; `snapshot` turns the watched cluster into the engine's
//! input; `records` turns NodePools and NodeClaims into the contract's records.
//! The loops: `cluster` watches; `provisioner` (with `batcher`) turns pending
//! pods into NodeClaims; `lifecycle` launches, registers, initializes and
//! finalizes each NodeClaim; `node_termination` drains Nodes being deleted;
//! `disruption` removes and replaces nodes the engine picks;
//! `garbage_collection` reconciles cloud instances with NodeClaims;
//! `static_pools` keeps static NodePools at their replicas and
//! `capacity_buffers` turns CapacityBuffers into virtual pending pods;
//! `node_pool_status` and `node_class_status` write status; `leader` keeps
//! all of it to one replica; `server` exposes metrics and probes.
//!
//! Architecture Invariant: no decision about which nodes to run is made
//! here: that is `engine`'s. No cloud is named here: that is the plugins'.

pub mod crds;
pub mod records;
pub mod slim;
pub mod snapshot;

pub mod api_client;
mod batch_writes;
pub mod batcher;
pub mod capacity_buffers;
mod claim_pods;
pub mod cluster;
mod conditions;
pub mod disruption;
mod events;
#[cfg(test)]
mod fixtures;
mod fleet_metrics;
mod garbage_collection;
mod hash;
mod initial_list;
pub mod instance_types;
mod interruption;
pub mod leader;
mod lifecycle;
pub mod metrics;
mod node_addresses;
mod node_class_status;
mod node_classes;
pub mod node_overlays;
mod node_patch;
mod node_pool_status;
mod node_termination;
mod nominations;
pub mod provisioner;
mod server;
mod static_pools;
mod uid;
mod uid_store;
mod unavailable;
mod unseen_claims;

use anyhow::Context;
use karpenter_runtime::Registry;
use kube::Client;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Options {
    pub batch: batcher::Window,
    pub engine: engine::Options,
    /// A launched NodeClaim whose Node has not registered by then is deleted.
    pub registration_ttl: Duration,
    pub gc_interval: Duration,
    /// NodeClaims reconciled at once (each launch may wait minutes on a cloud).
    pub launch_concurrency: u16,
    /// `None` runs without leader election (a single replica).
    pub election: Option<leader::Election>,
    pub metrics_addr: SocketAddr,
    /// Reported on events.
    pub identity: String,
    pub disruption: disruption::Settings,
    /// Whether consolidation may replace a spot node with another spot node.
    pub spot_to_spot_consolidation: bool,
    /// Karpenter's `NodeOverlay` gate: NodeOverlays are read and applied.
    pub node_overlay: bool,
    /// Karpenter's `StaticCapacity` gate: NodePools with `spec.replicas`
    /// keep that many nodes.
    pub static_capacity: bool,
    /// Karpenter's `CapacityBuffer` gate: CapacityBuffers keep spare room.
    pub capacity_buffer: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: batcher::Window::default(),
            engine: engine::Options::default(),
            registration_ttl: Duration::from_secs(15 * 60),
            gc_interval: Duration::from_secs(120),
            launch_concurrency: 256,
            election: None,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            identity: "karpenter".into(),
            disruption: disruption::Settings::default(),
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

/// What every loop shares.
pub struct Ctx {
    pub client: Client,
    pub registry: Arc<Registry>,
    pub cluster: cluster::Cluster,
    pub node_classes: node_classes::NodeClasses,
    pub events: Arc<events::Events>,
    pub metrics: Arc<metrics::Metrics>,
    pub instance_types: instance_types::InstanceTypeCache,
    pub unavailable: unavailable::UnavailableOfferings,
    pub nominations: nominations::Nominations,
    pub claim_pods: claim_pods::ClaimPods,
    pub batch_writes: batch_writes::BatchWrites,
    pub overlays: node_overlays::NodeOverlays,
    pub buffers: capacity_buffers::CapacityBuffers,
    pub(crate) unseen_claims: unseen_claims::UnseenClaims,
    /// The nodes disruption commands under way hold.
    pub(crate) disrupting: disruption::InFlight,
    pub status_writes: lifecycle::Written,
    pub(crate) launch_backoff: lifecycle::LaunchBackoff,
    /// Passes that hold a copy of the whole cluster while they run (a
    /// disruption decision, a garbage-collection list) take turns here, so
    /// those copies never add up: on timers of 10 s and 2 min started
    /// together, they otherwise met every 2 min. The provisioner does not
    /// wait here, as its batches are latency-bound.
    pub whole_cluster_pass: tokio::sync::Mutex<()>,
    pub options: Options,
}

impl Ctx {
    pub fn new(
        client: Client,
        registry: Arc<Registry>,
        cluster: cluster::Cluster,
        metrics: Arc<metrics::Metrics>,
        options: Options,
    ) -> Arc<Ctx> {
        let node_classes = node_classes::NodeClasses::new(client.clone(), cluster.lists);
        // Watch the kinds the plugins serve now, so the first launch finds
        // its NodeClass listed; a plugin loaded later is watched on first use.
        node_classes.watch(&registry);
        let overlays = node_overlays::NodeOverlays::start(&client, &cluster, options.node_overlay);
        let buffers =
            capacity_buffers::CapacityBuffers::start(&client, &cluster, options.capacity_buffer);
        Arc::new(Ctx {
            overlays,
            buffers,
            node_classes,
            events: Arc::new(events::Events::new(client.clone(), &options.identity)),
            client,
            registry,
            cluster,
            metrics,
            instance_types: Default::default(),
            unavailable: Default::default(),
            nominations: Default::default(),
            claim_pods: Default::default(),
            batch_writes: Default::default(),
            unseen_claims: Default::default(),
            disrupting: Default::default(),
            status_writes: Default::default(),
            launch_backoff: Default::default(),
            whole_cluster_pass: Default::default(),
            options,
        })
    }
}

/// Runs until leadership is lost (an error: the process should exit so a
/// fresh start rebuilds its state) or the process is asked to stop (SIGTERM,
/// as the kubelet stops a pod, or SIGINT); a leader then releases its lease.
pub async fn run(client: Client, registry: Arc<Registry>, options: Options) -> anyhow::Result<()> {
    // Before anything else: as a container's PID 1, a signal without a
    // handler is ignored, and the kubelet would wait out the grace period.
    let shutdown = shutdown_signal()?;
    tokio::pin!(shutdown);
    let metrics = Arc::new(metrics::Metrics::default());
    let mut prometheus = prometheus_client::registry::Registry::default();
    metrics.register(&mut prometheus);
    registry.runtime().metrics.register(&mut prometheus);
    let fleet = Arc::new(fleet_metrics::FleetMetrics::default());
    prometheus.register_collector(Box::new(fleet.clone()));
    let endpoints = Arc::new(server::Endpoints {
        registry: prometheus,
        ready: false.into(),
    });
    let addr = server::serve(options.metrics_addr, endpoints.clone())
        .await
        .with_context(|| format!("listening on {}", options.metrics_addr))?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");

    // Plugins load (and compile) while the watchers fill, with the health
    // endpoints already answering.
    let cluster = cluster::Cluster::start(&client, metrics.clone()).await;
    let (loaded, synced) = tokio::select! {
        r = async { tokio::join!(registry.reload(), cluster.wait_ready()) } => r,
        () = &mut shutdown => return Ok(()),
    };
    loaded.context("loading the plugins")?;
    synced.context("waiting for the watchers")?;
    let _reload = registry.watch(Duration::from_secs(5));
    endpoints.ready.store(true, Ordering::Relaxed);
    tracing::info!(plugins = registry.plugins().len(), "caches synced");

    let mut elector = options
        .election
        .clone()
        .map(|e| leader::Elector::new(client.clone(), e));
    if let Some(elector) = &mut elector {
        tracing::info!("waiting for the leader lease");
        tokio::select! {
            () = elector.acquire() => {}
            () = &mut shutdown => return Ok(()),
        }
    }
    metrics.leader.set(1);
    let ctx = Ctx::new(client, registry, cluster, metrics, options);
    fleet.lead(ctx.clone());
    ctx.overlays
        .wait_ready()
        .await
        .context("waiting for the NodeOverlays")?;
    ctx.node_classes.wait_listed().await;
    let overlay_status = ctx.clone();
    let mut loops = vec![
        tokio::spawn(async move {
            overlay_status
                .overlays
                .run_status(overlay_status.client.clone())
                .await
        }),
        tokio::spawn(provisioner::run(ctx.clone())),
        tokio::spawn(lifecycle::run(ctx.clone())),
        tokio::spawn(node_termination::run(ctx.clone())),
        tokio::spawn(garbage_collection::run(ctx.clone())),
        tokio::spawn(node_pool_status::run(ctx.clone())),
        tokio::spawn(node_class_status::run(ctx.clone())),
        tokio::spawn(disruption::run(ctx.clone())),
        tokio::spawn(interruption::run(ctx.clone())),
        tokio::spawn(node_addresses::run(
            ctx.cluster.nodes.clone(),
            ctx.cluster.node_events.subscribe(),
            ctx.registry.runtime().cluster.clone(),
        )),
    ];
    if ctx.options.capacity_buffer {
        let buffers = ctx.clone();
        loops.push(tokio::spawn(async move {
            buffers
                .buffers
                .run(buffers.client.clone(), buffers.cluster.provision.clone())
                .await
        }));
    }
    if ctx.options.static_capacity {
        loops.push(tokio::spawn(static_pools::run(ctx.clone())));
    }
    tracing::info!("leading: provisioning and lifecycle started");
    let result = match &mut elector {
        Some(elector) => tokio::select! {
            () = elector.hold() => Err(anyhow::anyhow!("lost the leader lease")),
            () = &mut shutdown => Ok(()),
        },
        None => {
            shutdown.await;
            Ok(())
        }
    };
    for l in &loops {
        l.abort();
    }
    // Nothing acts any more once the lease is given up.
    for l in loops {
        let _ = l.await;
    }
    ctx.metrics.leader.set(0);
    if let (Ok(()), Some(elector)) = (&result, &mut elector) {
        elector.release().await;
    }
    result
}

/// Resolves on SIGTERM or SIGINT; the handlers are in place once this returns.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
    })
}
