//! One disruption decision over a consolidatable cluster of 100, 700 and
//! 2,000 nodes (about ten pods each).
//! `cargo bench -p karpenter-engine --bench disruption`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn disruption(c: &mut Criterion) {
    let mut group = c.benchmark_group("disruption");
    group.sample_size(10);
    for nodes in [100, 700, 2_000] {
        let snapshot = engine::bench::disruption_snapshot(nodes, nodes * 10);
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &snapshot, |b, s| {
            b.iter(|| engine::disrupt(s));
        });
    }
    group.finish();
}

criterion_group!(benches, disruption);
criterion_main!(benches);
