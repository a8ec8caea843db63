//! Static NodePools: pending pods get no NodeClaim from them, and their
//! nodes are never consolidated.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
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
