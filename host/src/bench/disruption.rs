//! `karpenter bench disruption`: one disruption decision over the engine's
//! consolidatable benchmark cluster (varied pod sizes, some empty nodes,
//! do-not-disrupt pods, a PDB and a budget), timed, with what it found;
//! optionally with a CapacityBuffer's room to keep.

use engine::disruption::{KeepKind, Method};
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct Report {
    pub nodes: usize,
    pub pods: usize,
    pub buffer_replicas: usize,
    pub runs: usize,
    /// The fastest decision.
    pub seconds: f64,
    /// The method that found the command, if any.
    pub method: Option<Method>,
    /// "delete" or "replace".
    pub decision: Option<&'static str>,
    pub candidates: usize,
    pub replacements: usize,
    /// $/hour the command saves, and what its candidates cost.
    pub savings_per_hour: f64,
    pub candidates_price_per_hour: f64,
    /// Kept nodes by the kind of their first reason.
    pub blocked: usize,
    pub unconsolidatable: usize,
    pub waiting: usize,
    pub peak_rss_mib: Option<f64>,
}

pub fn run(nodes: usize, pods: usize, buffer_replicas: usize, runs: usize) -> Report {
    let mut snapshot = engine::bench::disruption_snapshot(nodes, pods);
    snapshot
        .pending_pods
        .extend(super::buffer_pods(buffer_replicas));
    let mut best = f64::INFINITY;
    let mut plan = None;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let p = engine::disrupt(&snapshot);
        best = best.min(t.elapsed().as_secs_f64());
        plan = Some(p);
    }
    let plan = plan.unwrap_or_default();
    let count = |kind: KeepKind| {
        plan.kept
            .iter()
            .filter(|k| k.reasons.first().is_some_and(|r| r.kind == kind))
            .count()
    };
    let command = plan.command.as_ref();
    Report {
        nodes,
        pods,
        buffer_replicas,
        runs: runs.max(1),
        seconds: best,
        method: command.map(|c| c.method),
        decision: command.map(|c| if c.is_replace() { "replace" } else { "delete" }),
        candidates: command.map_or(0, |c| c.candidates.len()),
        replacements: command.map_or(0, |c| c.replacements.new_node_claims.len()),
        savings_per_hour: command.map_or(0.0, |c| c.savings),
        candidates_price_per_hour: command.map_or(0.0, |c| c.candidates_price),
        blocked: count(KeepKind::DisruptionBlocked),
        unconsolidatable: count(KeepKind::Unconsolidatable),
        waiting: count(KeepKind::Waiting),
        peak_rss_mib: super::scheduling::peak_rss_mib(),
    }
}
