//! NodeOverlays: prices and extended resources laid over a NodePool's
//! catalog, and what the scheduler then chooses.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use engine::overlay::{NodeOverlay, OverlayPool, PriceChange, apply};
use engine::*;
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE};

const SKU_CPU: &str = "karpenter.azure.com/sku-cpu";

fn overlay(
    name: &str,
    weight: i32,
    reqs: Vec<Requirement>,
    price: Option<PriceChange>,
) -> NodeOverlay {
    NodeOverlay {
        name: name.into(),
        weight,
        requirements: reqs,
        price,
        capacity: ResourceList::new(),
    }
}

/// The pool's catalog after the overlays, and what conflicted.
fn overlaid(pool: &NodePool, overlays: &[NodeOverlay]) -> (Vec<InstanceType>, Vec<String>) {
    let out = apply(
        &[OverlayPool {
            name: &pool.name,
            labels: &pool.labels,
            types: &pool.instance_types,
        }],
        overlays,
    );
    let types = out.pools[0]
        .clone()
        .unwrap_or_else(|| pool.instance_types.to_vec());
    (types, out.conflicts.into_keys().collect())
}

fn price(types: &[InstanceType], name: &str, ct: &str) -> f64 {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap()
        .offerings
        .iter()
        .find(|o| o.capacity_type == ct)
        .unwrap()
        .price
}

#[test]
fn a_cheaper_family_changes_the_type_chosen() {
    let mut p = pool("default", d_series());
    p.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["on-demand"])];
    let before = schedule(&snapshot(vec![p.clone()], pods("inflate", 5, 1000, 0)));
    let cheapest = |plan: &Plan| plan.new_node_claims[0].cheapest.clone().unwrap();
    assert_eq!(cheapest(&before).instance_type, "Standard_D8s_v5");

    let (types, conflicts) = overlaid(
        &p,
        &[overlay(
            "big-is-cheap",
            10,
            vec![req(SKU_CPU, Operator::In, &["16"])],
            Some(PriceChange::Set(0.1)),
        )],
    );
    assert!(conflicts.is_empty());
    p.instance_types = types.into();
    let after = schedule(&snapshot(vec![p], pods("inflate", 5, 1000, 0)));
    let chosen = cheapest(&after);
    assert_eq!(chosen.instance_type, "Standard_D16s_v5");
    assert_eq!(chosen.price, 0.1);
}

#[test]
fn a_spot_adjustment_reprices_only_spot_offerings() {
    let p = pool("default", d_series());
    let (types, _) = overlaid(
        &p,
        &[overlay(
            "spot-dearer",
            1,
            vec![req(CAPACITY_TYPE, Operator::In, &["spot"])],
            Some(PriceChange::Percent(50.0)),
        )],
    );
    let od = 0.048 * 2.0;
    assert!((price(&types, "Standard_D2s_v5", "on-demand") - od).abs() < 1e-12);
    assert!((price(&types, "Standard_D2s_v5", "spot") - od * 0.7 * 1.5).abs() < 1e-12);
    let spot = types[0]
        .offerings
        .iter()
        .find(|o| o.capacity_type == "spot")
        .unwrap();
    assert_eq!(spot.price_overlay.as_deref(), Some("spot-dearer"));
}

#[test]
fn the_heavier_overlay_sets_the_price_and_equal_weights_conflict() {
    let p = pool("default", d_series());
    let d2 = vec![req(INSTANCE_TYPE, Operator::In, &["Standard_D2s_v5"])];
    let (types, conflicts) = overlaid(
        &p,
        &[
            overlay("light", 1, d2.clone(), Some(PriceChange::Set(5.0))),
            overlay("heavy", 9, d2.clone(), Some(PriceChange::Add(-0.05))),
        ],
    );
    assert!(conflicts.is_empty());
    assert!((price(&types, "Standard_D2s_v5", "on-demand") - (0.096 - 0.05)).abs() < 1e-12);

    let (types, conflicts) = overlaid(
        &p,
        &[
            overlay("a", 5, d2.clone(), Some(PriceChange::Set(1.0))),
            overlay("b", 5, d2.clone(), Some(PriceChange::Set(2.0))),
        ],
    );
    // "b" goes first among equals; "a" then conflicts and changes nothing.
    assert_eq!(conflicts, ["a"]);
    assert_eq!(price(&types, "Standard_D2s_v5", "on-demand"), 2.0);
}

#[test]
fn a_price_never_goes_below_zero() {
    assert_eq!(PriceChange::Add(-1.0).apply(0.5), 0.0);
    assert_eq!(PriceChange::Percent(-100.0).apply(0.5), 0.0);
    assert_eq!(
        PriceChange::parse_adjustment("+10%").unwrap(),
        PriceChange::Percent(10.0)
    );
    assert_eq!(
        PriceChange::parse_adjustment("-0.5").unwrap(),
        PriceChange::Add(-0.5)
    );
    assert_eq!(
        PriceChange::parse_price("1.25").unwrap(),
        PriceChange::Set(1.25)
    );
    assert!(PriceChange::parse_adjustment("10%").is_err());
    assert!(PriceChange::parse_adjustment("-150%").is_err());
    assert!(PriceChange::parse_price("-1").is_err());
}

#[test]
fn extended_capacity_lets_a_pod_that_asks_for_it_schedule() {
    let mut p = pool("default", d_series());
    let mut pod = pod("hugepages", 500, GI);
    pod.requests.insert("hugepages-2Mi".into(), 512 << 20);
    let before = schedule(&snapshot(vec![p.clone()], vec![pod.clone()]));
    assert_eq!(before.unschedulable.len(), 1);

    let mut o = overlay(
        "hugepages",
        1,
        vec![req(SKU_CPU, Operator::In, &["4", "8"])],
        None,
    );
    o.capacity.insert("hugepages-2Mi".into(), 1 << 30);
    let (types, _) = overlaid(&p, &[o]);
    let with: Vec<&str> = types
        .iter()
        .filter(|t| !t.capacity_overlays.is_empty())
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(with, ["Standard_D4s_v5", "Standard_D8s_v5"]);
    p.instance_types = types.into();
    let after = schedule(&snapshot(vec![p], vec![pod]));
    assert!(after.unschedulable.is_empty(), "{after:#?}");
    assert_eq!(
        after.new_node_claims[0]
            .cheapest
            .as_ref()
            .unwrap()
            .instance_type,
        "Standard_D4s_v5"
    );
}

#[test]
fn an_overlay_matches_nodepool_labels_and_names_not_undefined_keys() {
    let mut p = pool("gpu-team", d_series());
    p.labels = labels(&[("team", "ml")]);
    let cheap = Some(PriceChange::Set(0.0));
    let touched = |reqs: Vec<Requirement>| {
        let (types, _) = overlaid(&p, &[overlay("o", 1, reqs, cheap)]);
        types
            .iter()
            .filter(|t| t.offerings.iter().any(|o| o.price_overlay.is_some()))
            .count()
    };
    assert_eq!(touched(vec![req("team", Operator::In, &["ml"])]), 5);
    assert_eq!(
        touched(vec![req(
            "karpenter.sh/nodepool",
            Operator::In,
            &["gpu-team"]
        )]),
        5
    );
    assert_eq!(
        touched(vec![req("karpenter.sh/nodepool", Operator::In, &["other"])]),
        0
    );
    // No label defines it: only NotIn and DoesNotExist are met.
    assert_eq!(touched(vec![req("undefined", Operator::In, &["x"])]), 0);
    assert_eq!(touched(vec![req("undefined", Operator::NotIn, &["x"])]), 5);
}

#[test]
fn no_overlay_leaves_the_catalog_shared() {
    let p = pool("default", d_series());
    let out = apply(
        &[OverlayPool {
            name: &p.name,
            labels: &p.labels,
            types: &p.instance_types,
        }],
        &[overlay(
            "elsewhere",
            1,
            vec![req("karpenter.sh/nodepool", Operator::In, &["other"])],
            Some(PriceChange::Set(0.0)),
        )],
    );
    assert_eq!(out.pools, vec![None]);
}
