//! What the controller asks the API server per launch: its stores answer
//! reads of objects it watches (NodeClasses included), so the GETs of a
//! NodeClass must not grow with the number of NodeClaims launched from it.

use crate::common;

use common::cluster::*;
use std::time::Duration;

/// Launches per run; `KARPENTER_TEST_LAUNCHES` raises it to measure at scale.
fn launches() -> usize {
    std::env::var("KARPENTER_TEST_LAUNCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40)
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER=NAME (tests/cluster/up NAME)"]
async fn a_launch_reads_its_node_class_from_the_store() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-api-reads", "api-reads");
    namespace(&client, ns).await;
    apply(&c, node_class());
    let mut np = node_pool(pool, requirements_on_demand_amd64());
    // No limits: at scale they would hold launches back, which is not what
    // this measures.
    if let Some(spec) = np["spec"].as_object_mut() {
        spec.remove("limits");
    }
    apply(&c, np);
    apply(&c, deployment(ns, "one-per-node", pool, 0, "100m", true));
    let controller = Controller::start(&c, &[], &["--disable-leader-election"]);
    let launches = launches();
    let before = api_requests(&client).await;
    scale(&client, ns, "one-per-node", launches as i32).await;
    let wait = Duration::from_secs(300.max(launches as u64));
    wait_for("every pod running", wait, || {
        pods_running(&client, ns, "one-per-node", launches)
    })
    .await;
    wait_for("every NodeClaim ready", wait, || {
        claims_ready(&client, pool)
    })
    .await;
    let after = api_requests(&client).await;
    let launched = claims_of(&client, pool).await.len();
    // One pod per node: a NodeClaim more is a node planned twice (a batch
    // that did not yet see an earlier batch's NodeClaims).
    assert_eq!(
        launched, launches,
        "NodeClaims for {launches} one-per-node pods"
    );
    let counted = requests_between(
        &before,
        &after,
        &["kwoknodeclasses", "nodeclaims", "nodepools", "nodes"],
    );
    eprintln!("API requests for {launched} launches (all clients), per launch:");
    for ((verb, resource), n) in &counted {
        eprintln!(
            "  {verb:>6} {resource:<16} {n:>6} {:>6.2}",
            n / launched as f64
        );
    }
    let log = std::env::temp_dir().join("karpenter-api-reads.log");
    let _ = std::fs::write(&log, controller.log());
    eprintln!("controller log: {}", log.display());
    // One pod per node: a NodeClaim more is a node planned twice (a batch
    // that did not yet see an earlier batch's NodeClaims).
    assert_eq!(
        launched, launches,
        "NodeClaims for {launches} one-per-node pods"
    );
    let class_gets = counted
        .get(&("GET".to_string(), "kwoknodeclasses".to_string()))
        .copied()
        .unwrap_or(0.0);
    assert!(
        class_gets < (launched / 4) as f64,
        "{class_gets} GETs of the NodeClass for {launched} launches"
    );
    clean_up(&client, ns, pool).await;
    drop(controller);
}
