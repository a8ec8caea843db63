//! What-if: decisions carried out on a snapshot, and the difference.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
use engine::disruption::*;
use engine::*;
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE};

fn on_demand(mut p: DisruptionNodePool) -> DisruptionNodePool {
    p.pool.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["on-demand"])];
    p
}

fn d(name: &str, ty: &str) -> ClusterNode {
    managed(name, "default", ty, "zone-1", "on-demand")
}

#[test]
fn pending_pods_land_on_the_nodes_the_plan_launches() {
    let mut snap = dsnapshot(vec![on_demand(dpool("default", d_series()))], vec![]);
    snap.pending_pods = pods("web", 3, 1000, GI);
    let before = snap.clone();
    let plan = schedule(&whatif::scheduling_view(&snap));
    let launched = whatif::provision(&mut snap, &plan);
    assert_eq!(launched, ["default-new-1"]);
    assert!(snap.pending_pods.is_empty());
    let node = &snap.nodes[0];
    assert_eq!(node.pods.len(), 3);
    assert_eq!(
        node.labels.get(INSTANCE_TYPE).map(String::as_str),
        Some("Standard_D4s_v5")
    );
    let diff = whatif::diff(&before, &snap);
    assert_eq!(diff.added.len(), 1);
    assert_eq!(diff.pods_placed, 3);
    assert!((diff.price_after - d_price("Standard_D4s_v5", "on-demand")).abs() < 1e-9);
    assert!(diff.changes());
}

#[test]
fn settling_consolidates_until_nothing_more_would_change() {
    let mut snap = dsnapshot(
        vec![on_demand(dpool("default", d_series()))],
        vec![
            filled(d("big", "Standard_D16s_v5"), 2, 1000),
            d("empty", "Standard_D8s_v5"),
        ],
    );
    let before = snap.clone();
    let settled = whatif::settle(&mut snap, 10);
    assert!(!settled.cut_short);
    let methods: Vec<&str> = settled.steps.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["Emptiness", "SingleNodeConsolidation"]);
    assert_eq!(settled.steps[0].removed, ["empty"]);
    assert_eq!(settled.steps[1].removed, ["big"]);
    let diff = whatif::diff(&before, &snap);
    assert_eq!(diff.removed.len(), 2);
    assert_eq!(diff.added.len(), 1);
    assert_eq!(diff.pods_moved, 2);
    assert!(diff.price_after < diff.price_before);
    // The same snapshot settles the same way, byte for byte.
    let mut again = before.clone();
    let again_settled = whatif::settle(&mut again, 10);
    assert_eq!(
        serde_json::to_string(&again_settled).unwrap(),
        serde_json::to_string(&settled).unwrap()
    );
}

#[test]
fn a_drifted_node_is_replaced_and_its_pods_follow() {
    let mut pool = on_demand(dpool("default", d_series()));
    pool.pool
        .requirements
        .push(req(INSTANCE_TYPE, Operator::NotIn, &["Standard_D16s_v5"]));
    let mut snap = dsnapshot(
        vec![pool],
        vec![filled(d("old", "Standard_D16s_v5"), 12, 1000)],
    );
    let before = snap.clone();
    let settled = whatif::settle(&mut snap, 10);
    assert_eq!(settled.steps[0].method, "Drift");
    assert_eq!(settled.steps[0].reason, "Drifted");
    let diff = whatif::diff(&before, &snap);
    assert_eq!(diff.removed[0].name, "old");
    assert!(
        diff.added
            .iter()
            .all(|n| n.instance_type.as_deref() != Some("Standard_D16s_v5"))
    );
    assert_eq!(diff.pods_moved, 12);
    assert_eq!(diff.pods_pending_after, 0);
}
