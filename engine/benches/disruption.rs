//! One disruption decision over a consolidatable cluster of 100, 700 and
//! 2,000 nodes (about ten pods each), and over the same cluster when nothing
//! can go, so that every candidate is simulated (the worst case).
//! `cargo bench -p karpenter-engine --bench disruption`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use engine::disruption::DisruptionSnapshot;

const SIZES: [usize; 3] = [100, 700, 2_000];

/// Every node spot (spot-to-spot is off) and full: no node can be deleted or
/// replaced, and single-node consolidation tries them all.
fn nothing_to_do(mut s: DisruptionSnapshot) -> DisruptionSnapshot {
    for n in &mut s.nodes {
        n.labels
            .insert(vocabulary::labels::CAPACITY_TYPE.into(), "spot".into());
        let used: i64 = n
            .pods
            .iter()
            .map(|p| p.pod.requests.get("cpu").copied().unwrap_or(0))
            .sum();
        n.allocatable.insert("cpu".into(), used);
    }
    s
}

fn disruption(c: &mut Criterion) {
    let mut group = c.benchmark_group("disruption");
    group.sample_size(10);
    for nodes in SIZES {
        let snapshot = engine::bench::disruption_snapshot(nodes, nodes * 10);
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &snapshot, |b, s| {
            b.iter(|| engine::disrupt(s));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("disruption_nothing_to_do");
    group.sample_size(10);
    for nodes in SIZES {
        let snapshot = nothing_to_do(engine::bench::disruption_snapshot(nodes, nodes * 10));
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &snapshot, |b, s| {
            b.iter(|| engine::disrupt(s));
        });
    }
    group.finish();
}

criterion_group!(benches, disruption);
criterion_main!(benches);
