//! Static NodePools: pending pods get no NodeClaim from them, and their
//! nodes are never consolidated.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
use engine::disruption::{ClusterNode, Method};
use engine::*;

fn fixed(replicas: u32) -> NodePool {
    let mut p = pool("fixed", d_series());
    p.replicas = Some(replicas);
    p.weight = 100;
    p
}

#[test]
fn pending_pods_get_no_nodeclaim_from_a_static_pool() {
    let plan = schedule(&snapshot(
        vec![fixed(2), pool("default", d_series())],
        pods("web", 2, 1000, 0),
    ));
    assert_eq!(plan.new_node_claims.len(), 1, "{plan:#?}");
    assert_eq!(plan.new_node_claims[0].node_pool, "default");

    let alone = schedule(&snapshot(vec![fixed(2)], pods("web", 1, 1000, 0)));
    assert!(alone.new_node_claims.is_empty(), "{alone:#?}");
    assert_eq!(alone.unschedulable.len(), 1);
}

#[test]
fn pods_still_fit_on_a_static_pool_nodes() {
    let mut s = snapshot(vec![fixed(1)], pods("web", 1, 1000, 0));
    let mut n = node("fixed-1", 4, 16, &[("karpenter.sh/nodepool", "fixed")]);
    n.node_pool = Some("fixed".into());
    s.nodes.push(n);
    let plan = schedule(&s);
    assert!(plan.new_node_claims.is_empty());
    assert_eq!(
        target_of(&plan, "web-0"),
        Some(&Target::ExistingNode("fixed-1".into()))
    );
}

#[test]
fn an_empty_static_node_is_not_consolidated() {
    let mut p = dpool("fixed", d_series());
    p.pool.replicas = Some(1);
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![managed(
            "idle",
            "fixed",
            "Standard_D4s_v5",
            "zone-1",
            "on-demand",
        )],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(
        reasons(&plan, "idle")
            .iter()
            .any(|r| r.contains("is static")),
        "{plan:#?}"
    );
}

fn static_dpool(replicas: u32) -> engine::disruption::DisruptionNodePool {
    let mut p = dpool("fixed", d_series());
    p.pool.replicas = Some(replicas);
    p
}

fn fixed_node(name: &str, drifted: bool) -> ClusterNode {
    let mut n = managed(name, "fixed", "Standard_D4s_v5", "zone-1", "on-demand");
    n.node_pool_hash_drifted = drifted;
    n
}

#[test]
fn a_drifted_static_node_is_replaced_from_the_template_first() {
    let plan = disrupt(&dsnapshot(
        vec![static_dpool(2)],
        vec![
            filled(fixed_node("old", true), 2, 500),
            fixed_node("fine", false),
        ],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates, ["old"]);
    // One NodeClaim from the NodePool's template, whatever the pods need.
    assert_eq!(cmd.replacements.new_node_claims.len(), 1, "{plan:#?}");
    let claim = &cmd.replacements.new_node_claims[0];
    assert_eq!(claim.node_pool, "fixed");
    assert!(claim.pods.is_empty() && claim.instance_types.is_empty());
    assert!(
        reasons(&plan, "fine")
            .iter()
            .any(|r| r.contains("is static")),
        "{plan:#?}"
    );
}

#[test]
fn static_drift_waits_for_a_scale_down_the_node_limit_and_the_budget() {
    // Above its replicas: the scale-down goes first.
    let plan = disrupt(&dsnapshot(
        vec![static_dpool(1)],
        vec![fixed_node("old", true), fixed_node("fine", false)],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    let says = |plan: &engine::disruption::DisruptionPlan, what: &str| {
        reasons(plan, "old").iter().any(|r| r.contains(what))
    };
    assert!(says(&plan, "scaling down"), "{plan:#?}");

    // No room under limits.nodes for the replacement.
    let mut p = static_dpool(2);
    p.pool.limits = res(&[("nodes", 2)]);
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![fixed_node("old", true), fixed_node("fine", false)],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(
        says(
            &plan,
            "static NodePool is at its node limit and cannot stage a replacement"
        ),
        "{plan:#?}"
    );

    // One at a time: a node already going takes the budget of one.
    let mut p = static_dpool(2);
    p.budgets = vec![engine::disruption::Budget {
        nodes: "1".into(),
        ..Default::default()
    }];
    let mut going = fixed_node("going", true);
    going.deleting = true;
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![going, fixed_node("old", true), fixed_node("next", false)],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(says(&plan, "No allowed disruptions"), "{plan:#?}");
}
