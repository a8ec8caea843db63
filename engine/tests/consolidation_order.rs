//! The order consolidation tries candidates in: Karpenter's, the most
//! dollars saved per pod moved first, each node counting one pod more than
//! it holds.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
use engine::disruption::*;
use engine::*;
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE};

const MI: i64 = 1 << 20;

/// A node of type `ty` holding `large` pods of 3500m/28Gi and `small` of
/// 900m/3100Mi, the two sizes of the side-by-side harness's scale-out.
fn node(name: &str, ty: &str, large: usize, small: usize) -> ClusterNode {
    let t = kwok_families().into_iter().find(|t| t.name == ty).unwrap();
    let pods = (0..large)
        .map(|i| running(&format!("{name}-large-{i}"), 3500, 28 * GI))
        .chain((0..small).map(|i| running(&format!("{name}-small-{i}"), 900, 3100 * MI)))
        .collect();
    with_pods(managed_as(name, "default", &t, "zone-1", "on-demand"), pods)
}

fn running(name: &str, cpu_milli: i64, mem: i64) -> NodePod {
    NodePod {
        pod: pod(name, cpu_milli, mem),
        start_time: Some(NOW - DAY),
        ..NodePod::default()
    }
}

fn cluster(nodes: Vec<ClusterNode>) -> DisruptionSnapshot {
    let mut pool = dpool("default", kwok_families());
    pool.pool.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["on-demand"])];
    dsnapshot(vec![pool], nodes)
}

fn types(snap: &DisruptionSnapshot) -> Vec<&str> {
    let mut out: Vec<&str> = snap
        .nodes
        .iter()
        .map(|n| n.labels[INSTANCE_TYPE].as_str())
        .collect();
    out.sort();
    out
}

/// After a scale-down from two full m-256x and three small nodes: 88 pods
/// of each size, 387 cores. Ordered without the node's own count, the
/// nearly empty small nodes come first, multi-node consolidation merges
/// them into the m-256x nodes, and those two can then only each be replaced
/// by one node: an m-256x and an m-192x, 15.05 $/h. In Karpenter's order an
/// m-256x comes first and goes with the s-48x for an m-128x, and what is
/// left is an m-256x, an m-128x and an m-4x.
#[test]
fn consolidation_moves_the_most_dollars_per_pod_first() {
    let mut snap = cluster(vec![
        node("a", "m-256x", 40, 44),
        node("b", "m-256x", 44, 38),
        node("c", "s-48x", 3, 6),
        node("d", "s-8x", 0, 0),
        node("e", "m-4x", 1, 0),
    ]);
    let before = snap.clone();
    let settled = whatif::settle(&mut snap, 20);
    let steps: Vec<(&str, &[String])> = settled
        .steps
        .iter()
        .map(|s| (s.method.as_str(), s.removed.as_slice()))
        .collect();
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (empty, merged) = (names(&["d"]), names(&["b", "c"]));
    assert_eq!(
        steps,
        [
            ("Emptiness", empty.as_slice()),
            ("MultiNodeConsolidation", merged.as_slice()),
        ]
    );
    assert!(snap.pending_pods.is_empty());
    assert_eq!(types(&snap), ["m-128x", "m-256x", "m-4x"]);
    let diff = whatif::diff(&before, &snap);
    assert!(
        (diff.price_after - 13.03).abs() < 0.01,
        "{:.2} $/h",
        diff.price_after
    );
}
