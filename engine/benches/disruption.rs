//! One disruption decision over a consolidatable cluster of 100, 700 and
//! 2,000 nodes (about ten pods each), and over the same cluster when nothing
//! can go, so that every candidate is simulated (the worst case); and one
//! repair decision over the same sizes, one node in fifty unhealthy; and
//! the what-if `karpenter simulate --disruption` runs at 1,000 nodes and
//! 10,000 pods: disruption settled on its own results, and the difference.
//! `cargo bench -p karpenter-engine --bench disruption`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use engine::disruption::DisruptionSnapshot;
use engine::disruption::repair::{NodeCondition, RepairNode, RepairPolicy};

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

/// `nodes` nodes in ten NodePools, each with a kubelet's five conditions
/// against two policies; every fiftieth node NotReady for an hour.
fn repair_input(nodes: usize) -> Vec<RepairNode> {
    let policies = vec![
        RepairPolicy {
            condition_type: "Ready".into(),
            status: "False".into(),
            toleration_seconds: 1_800,
        },
        RepairPolicy {
            condition_type: "Ready".into(),
            status: "Unknown".into(),
            toleration_seconds: 1_800,
        },
    ];
    (0..nodes)
        .map(|i| RepairNode {
            name: format!("node-{i}"),
            node_pool: format!("pool-{}", i % 10),
            conditions: [
                "MemoryPressure",
                "DiskPressure",
                "PIDPressure",
                "NetworkUnavailable",
            ]
            .iter()
            .map(|t| NodeCondition {
                condition_type: t.to_string(),
                status: "False".into(),
                since: Some(0),
            })
            .chain([NodeCondition {
                condition_type: "Ready".into(),
                status: if i % 50 == 0 { "False" } else { "True" }.into(),
                since: Some(0),
            }])
            .collect(),
            policies: policies.clone(),
            deleting: false,
            initialized: true,
        })
        .collect()
}

fn repair(c: &mut Criterion) {
    let mut group = c.benchmark_group("repair");
    // Karpenter's default budget on each of the ten NodePools.
    let budgets: std::collections::BTreeMap<String, Vec<engine::disruption::Budget>> = (0..10)
        .map(|i| {
            let default = engine::disruption::DisruptionNodePool::default().budgets;
            (format!("pool-{i}"), default)
        })
        .collect();
    for nodes in SIZES {
        let input = repair_input(nodes);
        group.bench_with_input(BenchmarkId::from_parameter(nodes), &input, |b, n| {
            b.iter(|| engine::disruption::repair::repair(3_600, n, &budgets));
        });
    }
    group.finish();
}

fn whatif(c: &mut Criterion) {
    let mut group = c.benchmark_group("whatif_settle");
    group.sample_size(10);
    let snapshot = engine::bench::disruption_snapshot(1_000, 10_000);
    group.bench_with_input(BenchmarkId::from_parameter(1_000), &snapshot, |b, s| {
        b.iter(|| {
            let mut after = s.clone();
            let settled = engine::whatif::settle(&mut after, 2 * s.nodes.len() + 10);
            (settled, engine::whatif::diff(s, &after))
        });
    });
    group.finish();
}

criterion_group!(benches, disruption, repair, whatif);
criterion_main!(benches);
