//! CapacityBuffers: their virtual pods take the room real pods leave, make
//! NodeClaims for the rest, and hold their room through disruption.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
use engine::buffer::{self, Outcome};
use engine::disruption::*;
use engine::*;
use std::sync::Arc;

/// `count` virtual pods of buffer default/spare, `cpu_milli` each.
fn spare(count: usize, cpu_milli: i64) -> Vec<Pod> {
    buffer_pods("spare", count, cpu_milli, "web")
}

#[test]
fn the_buffer_takes_free_room_first_and_a_nodeclaim_for_the_rest() {
    let mut s = snapshot(vec![pool("default", d_series())], spare(3, 1000));
    // Two of the four CPUs are taken.
    let mut n = node("n1", 4, 16, &[]);
    n.pods = (0..2).map(|i| busy(&format!("p{i}"), 1000)).collect();
    s.nodes.push(n);
    let plan = schedule(&s);
    assert_eq!(plan.new_node_claims.len(), 1, "{plan:#?}");
    let outcome = &buffer::outcomes(&plan, &s.pods)["default/spare"];
    assert_eq!(
        outcome,
        &Outcome {
            existing: 2,
            new: 1,
            failed: 0,
            reason: None
        }
    );
}

#[test]
fn real_pods_take_the_room_before_the_buffer() {
    let mut pods = spare(2, 1000);
    pods.extend(common::pods("web", 2, 1000, 0));
    let mut s = snapshot(vec![pool("default", d_series())], pods);
    s.nodes.push(node("n1", 2, 16, &[]));
    let plan = schedule(&s);
    for p in ["web-0", "web-1"] {
        assert_eq!(
            target_of(&plan, p),
            Some(&Target::ExistingNode("n1".into())),
            "{plan:#?}"
        );
    }
    assert_eq!(buffer::outcomes(&plan, &s.pods)["default/spare"].new, 2);
}

#[test]
fn a_buffer_that_cannot_fit_says_why() {
    let plan_pods = spare(1, 64_000);
    let s = snapshot(vec![pool("default", d_series())], plan_pods);
    let plan = schedule(&s);
    let o = &buffer::outcomes(&plan, &s.pods)["default/spare"];
    assert_eq!(o.failed, 1);
    assert!(o.reason.as_deref().unwrap().contains("cpu"), "{o:?}");
}

fn busy(name: &str, cpu: i64) -> BoundPod {
    BoundPod {
        namespace: "default".into(),
        name: name.into(),
        template: Arc::new(PodTemplate {
            requests: res(&[("cpu", cpu)]),
            ..PodTemplate::default()
        }),
    }
}

/// On-demand only: a node is never replaced by a cheaper spot one here.
fn on_demand() -> DisruptionNodePool {
    let mut p = dpool("default", d_series());
    p.pool.requirements = vec![req(
        vocabulary::labels::CAPACITY_TYPE,
        Operator::In,
        &["on-demand"],
    )];
    p
}

fn d(name: &str, ty: &str) -> ClusterNode {
    managed(name, "default", ty, "zone-1", "on-demand")
}

#[test]
fn a_node_holding_buffer_room_is_not_empty() {
    let mut s = dsnapshot(vec![on_demand()], vec![d("holder", "Standard_D2s_v5")]);
    s.pending_pods = spare(1, 1500);
    let plan = disrupt(&s);
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(
        reasons(&plan, "holder")
            .contains(&"Holds room for 1 pod(s) of CapacityBuffer default/spare"),
        "{plan:#?}"
    );

    // Without the buffer the same node is deleted as empty.
    s.pending_pods.clear();
    assert_eq!(command(&disrupt(&s)).method, Method::Emptiness);
}

/// A buffer's pod of 2.5 CPUs on an empty D8, beside a D4 with room for it.
fn room_on_the_small_node() -> DisruptionSnapshot {
    let mut s = dsnapshot(
        vec![on_demand()],
        vec![
            filled(d("small", "Standard_D4s_v5"), 1, 1000),
            d("large", "Standard_D8s_v5"),
        ],
    );
    s.pending_pods = spare(1, 2500);
    s
}

#[test]
fn consolidation_moves_buffer_room_but_never_drops_it() {
    // The buffer's pod sits on a D8 with room for it on the D4 beside it:
    // the D8 goes, the room moves to the D4.
    let s = room_on_the_small_node();
    let plan = disrupt(&s);
    let cmd = command(&plan);
    assert_eq!(cmd.candidates, ["large"], "{plan:#?}");
    assert_eq!(cmd.method, Method::SingleNodeConsolidation, "{plan:#?}");
    assert!(!cmd.is_replace());

    // With no room left on the D4, the D8 is replaced by a cheaper node that
    // holds the room, not deleted.
    let mut s2 = s.clone();
    s2.nodes[0] = filled(d("small", "Standard_D4s_v5"), 3, 1000);
    let plan = disrupt(&s2);
    let cmd = command(&plan);
    assert_eq!(cmd.candidates, ["large"], "{plan:#?}");
    assert!(cmd.is_replace(), "{plan:#?}");
    assert_eq!(cmd.replacements.new_node_claims[0].requests["cpu"], 2500);
}

#[test]
fn a_pdb_on_the_buffers_labels_does_not_block() {
    let mut s = room_on_the_small_node();
    s.pdbs = vec![PodDisruptionBudget {
        namespace: "default".into(),
        name: "web".into(),
        selector: selector(&[("app", "web")]),
        disruptions_allowed: 0,
        always_allow_unhealthy: false,
    }];
    assert_eq!(command(&disrupt(&s)).candidates, ["large"]);
}

#[test]
fn a_pending_pod_takes_the_room_before_the_buffer_holds_it() {
    // The one free slot on the D2 goes to the real pod waiting for it, as
    // provisioning would place it; the buffer holds no room there.
    let mut holder = d("holder", "Standard_D2s_v5");
    holder.nominated = true;
    let mut s = dsnapshot(vec![on_demand()], vec![holder]);
    s.pending_pods = spare(1, 1500);
    s.pending_pods.push(pod("real", 1500, 0));
    let plan = disrupt(&s);
    let why = reasons(&plan, "holder");
    assert!(!why.iter().any(|r| r.starts_with("Holds room")), "{why:?}");
}
