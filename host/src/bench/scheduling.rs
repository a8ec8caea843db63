//! `karpenter bench scheduling`: Karpenter's own scheduling benchmark shape
//! (400 instance types, five pod kinds), timed on one core; optionally with
//! NodeOverlays laid over the catalog, reservations in it and a
//! CapacityBuffer's virtual pods among the pods.

use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct Report {
    pub pods: usize,
    pub instance_types: usize,
    pub overlays: usize,
    pub reservations: usize,
    pub buffer_replicas: usize,
    /// Laying the overlays over the catalog, as every pass does (fastest run).
    pub overlay_seconds: f64,
    pub runs: usize,
    pub node_claims: usize,
    pub unschedulable: usize,
    pub total_price_per_hour: f64,
    /// The fastest run.
    pub seconds: f64,
    pub pods_per_second: f64,
    /// Peak resident memory of the whole process (VmHWM), MiB.
    pub peak_rss_mib: Option<f64>,
}

/// What is laid over the benchmark's catalog.
#[derive(Debug, Clone, Copy, Default)]
pub struct Features {
    pub overlays: usize,
    pub reservations: usize,
    /// Virtual pods of one CapacityBuffer (1 CPU, 1 GiB each).
    pub buffer_replicas: usize,
}

pub fn run(pods: usize, instance_types: usize, runs: usize, features: Features) -> Report {
    let mut snapshot = engine::bench::scheduling_snapshot(pods, instance_types);
    add_reservations(&mut snapshot, features.reservations);
    snapshot
        .pods
        .extend(super::buffer_pods(features.buffer_replicas));
    let overlays = overlays(features.overlays);
    let base = snapshot.node_pools[0].instance_types.clone();
    let mut best = f64::INFINITY;
    let mut overlay_best = f64::INFINITY;
    let mut plan = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        if !overlays.is_empty() {
            let pool = &snapshot.node_pools[0];
            let out = engine::overlay::apply(
                &[engine::overlay::OverlayPool {
                    name: &pool.name,
                    labels: &pool.labels,
                    types: &base,
                }],
                &overlays,
            );
            if let Some(Some(types)) = out.pools.into_iter().next() {
                snapshot.node_pools[0].instance_types = types.into();
            }
        }
        overlay_best = overlay_best.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let p = engine::schedule(&snapshot);
        best = best.min(t.elapsed().as_secs_f64());
        plan = Some(p);
    }
    let plan = plan.unwrap_or_default();
    Report {
        pods,
        instance_types,
        overlays: features.overlays,
        reservations: features.reservations,
        buffer_replicas: features.buffer_replicas,
        overlay_seconds: if overlays.is_empty() {
            0.0
        } else {
            overlay_best
        },
        runs: runs.max(1),
        node_claims: plan.new_node_claims.len(),
        unschedulable: plan.unschedulable.len(),
        total_price_per_hour: plan.total_price_per_hour(),
        seconds: best,
        pods_per_second: pods as f64 / best,
        peak_rss_mib: peak_rss_mib(),
    }
}

/// Overlays of distinct weights (so none conflicts), each repricing spot
/// or on-demand offerings of the large or small types, or adding hugepages.
fn overlays(n: usize) -> Vec<engine::overlay::NodeOverlay> {
    use engine::overlay::{NodeOverlay, PriceChange};
    use engine::{Operator, Requirement};
    (0..n)
        .map(|i| {
            let size = if i % 2 == 0 { "large" } else { "small" };
            let capacity_type = if i % 3 == 0 { "spot" } else { "on-demand" };
            let mut capacity = engine::ResourceList::new();
            if i % 4 == 3 {
                capacity.insert("hugepages-2Mi".into(), 1 << 30);
            }
            NodeOverlay {
                name: format!("overlay-{i}"),
                weight: i as i32 + 1,
                requirements: vec![
                    Requirement::new("size", Operator::In, &[size]),
                    Requirement::new(
                        vocabulary::labels::CAPACITY_TYPE,
                        Operator::In,
                        &[capacity_type],
                    ),
                ],
                price: (i % 4 != 3).then_some(PriceChange::Percent(if i % 2 == 0 {
                    -5.0
                } else {
                    5.0
                })),
                capacity,
            }
        })
        .collect()
}

/// A reservation of 10 instances in test-zone-1 for each of the first `n`
/// instance types.
fn add_reservations(snapshot: &mut engine::Snapshot, n: usize) {
    if n == 0 {
        return;
    }
    let mut types = snapshot.node_pools[0].instance_types.to_vec();
    for (i, t) in types.iter_mut().take(n).enumerate() {
        let id = format!("r-{i}");
        t.offerings.push(engine::Offering {
            zone: Some("test-zone-1".into()),
            capacity_type: vocabulary::labels::RESERVED.into(),
            price: 0.0,
            available: true,
            reservation_capacity: Some(10),
            requirements: vec![engine::Requirement::new(
                "example.com/reservation-id",
                engine::Operator::In,
                &[&id],
            )],
            price_overlay: None,
        });
    }
    snapshot.node_pools[0].instance_types = types.into();
}

/// VmHWM from /proc/self/status, where there is one.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
