//! Runs Karpenter's scheduling benchmark shape once and prints the figures.
//!
//! `cargo run --release -p karpenter-engine --example bench_scheduling -- --pods 100000`

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
    let pods = arg("--pods", 20_000);
    let types = arg("--instance-types", 400);
    let snapshot = engine::bench::scheduling_snapshot(pods, types);
    let start = Instant::now();
    let plan = engine::schedule(&snapshot);
    let secs = start.elapsed().as_secs_f64();
    println!(
        "pods {pods} instance-types {types}: {secs:.3} s, {:.0} pods/s, {} new nodeclaims, {} unschedulable, ${:.2}/h",
        pods as f64 / secs,
        plan.new_node_claims.len(),
        plan.unschedulable.len(),
        plan.total_price_per_hour()
    );
    if let Some(u) = plan.unschedulable.first() {
        println!("first unschedulable: {}: {}", u.pod.name, u.reason);
    }
}
