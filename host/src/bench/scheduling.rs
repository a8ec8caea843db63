//! `karpenter bench scheduling`: Karpenter's own scheduling benchmark shape
//! (400 instance types, five pod kinds), timed on one core.

use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct Report {
    pub pods: usize,
    pub instance_types: usize,
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

pub fn run(pods: usize, instance_types: usize, runs: usize) -> Report {
    let snapshot = engine::bench::scheduling_snapshot(pods, instance_types);
    let mut best = f64::INFINITY;
    let mut plan = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let p = engine::schedule(&snapshot);
        best = best.min(t.elapsed().as_secs_f64());
        plan = Some(p);
    }
    let plan = plan.unwrap_or_default();
    Report {
        pods,
        instance_types,
        runs: runs.max(1),
        node_claims: plan.new_node_claims.len(),
        unschedulable: plan.unschedulable.len(),
        total_price_per_hour: plan.total_price_per_hour(),
        seconds: best,
        pods_per_second: pods as f64 / best,
        peak_rss_mib: peak_rss_mib(),
    }
}

/// VmHWM from /proc/self/status, where there is one.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
