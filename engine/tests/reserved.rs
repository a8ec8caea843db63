//! Reserved capacity: reservations are used first, counted down as
//! NodeClaims take them, and fallen back from once full.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use engine::*;
use vocabulary::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};

const RESERVATION: &str = "example.com/reservation-id";

/// A reserved offering of `count` instances left in reservation `id`.
fn reserved(zone: &str, id: &str, count: u32) -> Offering {
    Offering {
        reservation_capacity: Some(count),
        requirements: vec![req(RESERVATION, Operator::In, &[id])],
        ..offering(zone, "reserved", 0.0, true)
    }
}

/// D2 and D4 with their usual offerings; D2 also in reservation r-1 in zone-1.
fn catalog(count: u32) -> Vec<InstanceType> {
    let mut types = d_series();
    types[0].offerings.push(reserved("zone-1", "r-1", count));
    types
}

/// Pods of 1.5 CPUs, one per node.
fn big_pods(n: usize) -> Vec<Pod> {
    let mut pods = pods("app", n, 1500, GI);
    for p in &mut pods {
        p.labels = labels(&[("app", "solo")]);
        p.affinity.pod_anti_affinity = Some(PodAffinity {
            required: vec![term(HOSTNAME, &[("app", "solo")])],
            preferred: Vec::new(),
        });
    }
    pods
}

fn reserved_claims(plan: &Plan) -> Vec<&NewNodeClaim> {
    plan.new_node_claims
        .iter()
        .filter(|c| capacity_types(c) == ["reserved"])
        .collect()
}

#[test]
fn a_reservation_is_used_first_and_then_falls_back() {
    let plan = schedule(&snapshot(vec![pool("default", catalog(2))], big_pods(3)));
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    assert_eq!(plan.new_node_claims.len(), 3, "{plan:#?}");
    let reserved = reserved_claims(&plan);
    assert_eq!(reserved.len(), 2, "{plan:#?}");
    for claim in &reserved {
        assert_eq!(values(claim, RESERVATION), ["r-1"]);
        assert_eq!(zone_of(claim), "zone-1");
        assert_eq!(types(&plan, claim), ["Standard_D2s_v5"]);
        assert_eq!(claim.cheapest.as_ref().unwrap().price, 0.0);
    }
    let other = plan
        .new_node_claims
        .iter()
        .find(|c| capacity_types(c) != ["reserved"])
        .unwrap();
    assert!(
        !capacity_types(other).contains(&"reserved"),
        "the third must not launch into the full reservation: {other:#?}"
    );
    assert_eq!(other.cheapest.as_ref().unwrap().capacity_type, "spot");
}

#[test]
fn a_nodeclaim_not_launched_yet_holds_its_slot() {
    let reserved_labels = [
        (CAPACITY_TYPE, "reserved"),
        (RESERVATION, "r-1"),
        (ZONE, "zone-1"),
        (INSTANCE_TYPE, "Standard_D2s_v5"),
    ];
    let waiting = Node {
        in_flight: true,
        awaiting_launch: true,
        initialized: false,
        // Full: no pod lands on it.
        allocatable: res(&[("cpu", 0), ("memory", 0), ("pods", 0)]),
        ..node("claim-a", 0, 0, &reserved_labels)
    };
    let mut snap = snapshot(vec![pool("default", catalog(2))], big_pods(2));
    snap.nodes.push(waiting.clone());
    let plan = schedule(&snap);
    assert_eq!(reserved_claims(&plan).len(), 1, "{plan:#?}");

    // Once launched, the provider's count includes it: no slot is held here.
    snap.nodes[0].awaiting_launch = false;
    let plan = schedule(&snap);
    assert_eq!(reserved_claims(&plan).len(), 2, "{plan:#?}");
}

#[test]
fn a_full_reservation_is_not_offered() {
    let plan = schedule(&snapshot(vec![pool("default", catalog(0))], big_pods(1)));
    assert!(reserved_claims(&plan).is_empty(), "{plan:#?}");
    assert!(plan.unschedulable.is_empty());
}

#[test]
fn a_reserved_only_pool_leaves_pods_pending_once_full() {
    let mut p = pool("reserved-only", catalog(1));
    p.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["reserved"])];
    let plan = schedule(&snapshot(vec![p], big_pods(2)));
    assert_eq!(reserved_claims(&plan).len(), 1, "{plan:#?}");
    assert_eq!(plan.new_node_claims.len(), 1, "{plan:#?}");
    assert_eq!(plan.unschedulable.len(), 1, "{plan:#?}");
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains("every reservation it fits is taken") && reason.contains("r-1"),
        "{reason}"
    );
}

#[test]
fn a_reservation_without_an_id_is_its_type_and_zone() {
    let mut catalog = d_series();
    catalog[0].offerings.push(Offering {
        reservation_capacity: Some(1),
        ..offering("zone-2", "reserved", 0.0, true)
    });
    let plan = schedule(&snapshot(vec![pool("default", catalog)], big_pods(2)));
    let reserved = reserved_claims(&plan);
    assert_eq!(reserved.len(), 1, "{plan:#?}");
    assert_eq!(zone_of(reserved[0]), "zone-2");
    assert_eq!(types(&plan, reserved[0]), ["Standard_D2s_v5"]);
}

#[test]
fn two_nodepools_share_one_reservation() {
    let mut a = pool("a", catalog(1));
    a.weight = 10;
    let b = pool("b", catalog(1));
    let mut pods = big_pods(2);
    // The second pod can only use pool b.
    pods[1]
        .node_selector
        .insert("karpenter.sh/nodepool".into(), "b".into());
    let plan = schedule(&snapshot(vec![a, b], pods));
    assert_eq!(reserved_claims(&plan).len(), 1, "{plan:#?}");
}

#[test]
fn with_the_gate_off_reservations_are_never_used() {
    let mut snap = snapshot(vec![pool("default", catalog(2))], big_pods(2));
    snap.options.reserved_capacity = false;
    let plan = schedule(&snap);
    assert!(reserved_claims(&plan).is_empty(), "{plan:#?}");
    assert!(
        plan.new_node_claims
            .iter()
            .all(|c| !capacity_types(c).contains(&"reserved")),
        "{plan:#?}"
    );
}

#[test]
fn a_pod_left_without_a_reservation_does_not_skew_the_zones_it_was_counted_in() {
    // The A100 is reserved (one slot) in zone-2 and on demand elsewhere. The
    // big GPU pod, held to zone-2, takes the slot. The small one, spread by
    // zone, goes to zone-2 too, the emptiest, and finds the slot taken once
    // slots are handed out: the web pods spread after it must not have
    // counted it there.
    let mut gpu = a100();
    gpu.offerings
        .retain(|o| o.zone.as_deref() != Some("zone-2"));
    gpu.offerings.push(reserved("zone-2", "r-1", 1));
    let pools = vec![pool("gpu", vec![gpu]), pool("cpu", d_series())];
    let mut big = pod("big", 20_000, GI);
    big.requests.insert("nvidia.com/gpu".into(), 1);
    big.node_selector = labels(&[(ZONE, "zone-2")]);
    let spread_a = |mut p: Pod| {
        p.labels = labels(&[("app", "a")]);
        p.topology_spread_constraints = vec![spread(
            ZONE,
            1,
            &[("app", "a")],
            WhenUnsatisfiable::DoNotSchedule,
        )];
        p
    };
    let mut small = spread_a(pod("small", 4000, GI));
    small.requests.insert("nvidia.com/gpu".into(), 1);
    let mut pending = vec![big, small];
    for mut web in pods("web", 2, 500, GI).into_iter().map(spread_a) {
        web.node_selector = labels(&[("karpenter.sh/nodepool", "cpu")]);
        pending.push(web);
    }
    // A full node in zone-1 with one app-a pod.
    let mut full = node("full", 1, 1, &[(ZONE, "zone-1"), (HOSTNAME, "full")]);
    full.taints = vec![taint("full", "", TaintEffect::NoSchedule)];
    full.pods.push(bound("a-0", &[("app", "a")]));
    let plan = schedule(&Snapshot {
        nodes: vec![full],
        ..snapshot(pools, pending)
    });

    assert!(reason_of(&plan, "small").contains("r-1"), "{plan:#?}");
    assert_eq!(zone_of(claim_of(&plan, "big")), "zone-2");
    let mut zones: Vec<&str> = ["web-0", "web-1"]
        .iter()
        .map(|w| zone_of(claim_of(&plan, w)))
        .collect();
    zones.sort_unstable();
    assert_eq!(zones, ["zone-2", "zone-3"], "{plan:#?}");
}
