//! Karpenter's scheduling benchmark shape: 400 instance types, five pod kinds.
//! `cargo bench -p karpenter-engine --bench scheduling`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn scheduling(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling");
    group.sample_size(10);
    for pods in [1_000, 5_000, 20_000] {
        let snapshot = engine::bench::scheduling_snapshot(pods, 400);
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(BenchmarkId::from_parameter(pods), &snapshot, |b, s| {
            b.iter(|| engine::schedule(s));
        });
    }
    group.finish();
}

criterion_group!(benches, scheduling);
criterion_main!(benches);
