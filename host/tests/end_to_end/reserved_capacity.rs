//! End-to-end: reserved capacity with the kwok plugin's reservations. A
//! reservation of two instances is launched into first; the third pod's
//! node falls back to on-demand, and nothing is launched into the
//! reservation beyond its count.

use crate::common;

use common::cluster::*;
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;

const RESERVATION_ID: &str = "karpenter.kwok.sh/reservation-id";

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_reservation_is_used_first_and_the_third_node_falls_back_to_on_demand() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let run = std::process::id();
    let (ns, pool, reservation) = (
        format!("e2e-reserved-{run}"),
        format!("reserved-{run}"),
        format!("r-{run}"),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(
        &c,
        node_pool(
            pool,
            json!([
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "reserved"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}
            ]),
        ),
    );
    // One pod per node (hostname anti-affinity).
    apply(&c, deployment(ns, "reserved", pool, 0, "1", true));
    let reservations = format!("{reservation}=c-2x-amd64-linux/test-zone-a/2");
    let _controller = Controller::start(
        &c,
        &[("RESERVATIONS", reservations.as_str())],
        &["--disable-leader-election"],
    );
    scale(&client, ns, "reserved", 3).await;
    wait_for("three pods run", Duration::from_secs(120), || {
        pods_running(&client, ns, "reserved", 3)
    })
    .await;

    let nodes = kwok_nodes(&client, pool).await;
    let label = |n: &k8s_openapi::api::core::v1::Node, k: &str| {
        n.labels().get(k).cloned().unwrap_or_default()
    };
    let summary: Vec<(String, String)> = nodes
        .iter()
        .map(|n| {
            (
                label(n, "karpenter.sh/capacity-type"),
                label(n, RESERVATION_ID),
            )
        })
        .collect();
    assert_eq!(nodes.len(), 3, "{summary:?}");
    let reserved = summary.iter().filter(|(ct, _)| ct == "reserved").count();
    assert_eq!(reserved, 2, "two nodes in the reservation: {summary:?}");
    assert!(
        summary
            .iter()
            .filter(|(ct, _)| ct == "reserved")
            .all(|(_, id)| *id == reservation),
        "{summary:?}"
    );
    assert!(
        summary
            .iter()
            .any(|(ct, id)| ct == "on-demand" && id.is_empty()),
        "the third falls back to on-demand: {summary:?}"
    );
    // The NodeClaims say where they launch, as Karpenter's do.
    let claims = claims_of(&client, pool).await;
    let narrowed = claims
        .iter()
        .filter(|c| {
            c.spec
                .requirements
                .iter()
                .any(|r| r.key == "karpenter.sh/capacity-type" && r.values == ["reserved"])
                && c.spec
                    .requirements
                    .iter()
                    .any(|r| r.key == RESERVATION_ID && r.values == [reservation.clone()])
        })
        .count();
    assert_eq!(narrowed, 2, "{claims:#?}");

    // A fourth pod: the reservation is full, so it goes on-demand too.
    scale(&client, ns, "reserved", 4).await;
    wait_for("four pods run", Duration::from_secs(120), || {
        pods_running(&client, ns, "reserved", 4)
    })
    .await;
    let reserved = kwok_nodes(&client, pool)
        .await
        .iter()
        .filter(|n| label(n, "karpenter.sh/capacity-type") == "reserved")
        .count();
    assert_eq!(reserved, 2, "never beyond the reservation's count");
    clean_up(&client, ns, pool).await;
}
