//! Runs one disruption decision over the benchmark cluster and prints the
//! time it took and what it found.
//!
//! `cargo run --release -p karpenter-engine --example bench_disruption -- --nodes 700 --pods 7000`

use std::time::Instant;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let nodes = arg("--nodes", 700);
    let pods = arg("--pods", nodes * 10);
    let snapshot = engine::bench::disruption_snapshot(nodes, pods);
    let start = Instant::now();
    let plan = engine::disrupt(&snapshot);
    let secs = start.elapsed().as_secs_f64();
    let blocked = plan
        .kept
        .iter()
        .filter(|k| {
            k.reasons
                .iter()
                .any(|r| r.kind == engine::disruption::KeepKind::DisruptionBlocked)
        })
        .count();
    match &plan.command {
        Some(c) => println!(
            "nodes {nodes} pods {pods}: {secs:.3} s; {} of {} nodes by {} ({}), {} replacement(s), saving ${:.3}/h of ${:.3}/h; {blocked} blocked",
            if c.is_replace() { "replace" } else { "delete" },
            c.candidates.len(),
            c.method.as_str(),
            c.reason.as_str(),
            c.replacements.new_node_claims.len(),
            c.savings,
            c.candidates_price,
        ),
        None => println!("nodes {nodes} pods {pods}: {secs:.3} s; no command; {blocked} blocked"),
    }
}
