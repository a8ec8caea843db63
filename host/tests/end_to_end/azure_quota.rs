//! End-to-end: Azure launches within the subscription's vCPU quota. With
//! the cheapest family (DASv5) at 16 vCPUs and six 4-CPU pods, one per
//! node, the plugin reads the usages before it launches: that family takes
//! VMs up to its quota and the next cheapest family takes the rest, with no
//! VM create refused. The same run with `QUOTA_CHECK=false` counts the creates ARM
//! refuses when the plugin learns of quota only by failing.
//!
//! Needs what `azure_cluster` needs.

use crate::azure_cluster::{
    controller, example, node_class_ready, one_per_node, prepare, tear_down,
};
use crate::common;

use common::arm::{ArmEmulator, vms};
use common::cluster::*;
use serde_json::json;
use std::time::{Duration, Instant};

const FAMILY: &str = "standardDASv5Family";
const QUOTA: u64 = 16;
const APP: &str = "quota-app";

/// vCPUs of the sizes the test launches (Standard_D<n>...).
fn vcpus(size: &str) -> u64 {
    size.trim_start_matches("Standard_D")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or(0)
}

/// One run: six 4-CPU pods under the quota, until they all run. Returns the
/// VMs as (name, size) and the creates ARM refused for quota.
async fn six_pods_under_quota(check: bool) -> (Vec<(String, String)>, u64) {
    let (c, client, ns) = prepare(if check { "quota-on" } else { "quota-off" }).await;

    let arm = ArmEmulator::start(&c, &[]);
    arm.set_quota(json!({"familyCores": {FAMILY: QUOTA}})).await;
    let mut plugin = arm.plugin();
    if !check {
        plugin.config["settings"]["QUOTA_CHECK"] = json!("false");
    }
    let controller = controller(&c, &arm, plugin);
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml"] {
        kubectl(&c, &["apply", "-f", &example(f)]);
    }
    node_class_ready(&c).await;

    let started = Instant::now();
    // One per VM: six VMs of 8 vCPUs are asked for.
    apply(&c, one_per_node(&ns, APP, 6, "4"));
    wait_for("6 pods running", Duration::from_secs(300), || {
        pods_running(&client, &ns, APP, 6)
    })
    .await;
    let state = arm.state().await;
    let launched: Vec<(String, String)> = vms(&state)
        .into_iter()
        .map(|(name, size, _)| (name, size))
        .collect();
    let refused = state["quotaRefusals"].as_u64().unwrap_or(0);
    eprintln!(
        "quota check {}: 6 pods running {:.1}s after apply on {launched:?}; {refused} creates refused for quota",
        if check { "on" } else { "off" },
        started.elapsed().as_secs_f64()
    );

    tear_down(&c, &client, &arm, &ns, APP).await;
    drop(controller);
    (launched, refused)
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn azure_launches_within_the_vcpu_quota_without_a_refused_create() {
    let _serial = SERIAL.lock().await;
    let (launched, refused) = six_pods_under_quota(true).await;
    let in_family: u64 = launched
        .iter()
        .filter(|(_, size)| size.ends_with("as_v5"))
        .map(|(_, size)| vcpus(size))
        .sum();
    assert_eq!(
        in_family, QUOTA,
        "{FAMILY} used up to its quota: {launched:?}"
    );
    assert!(
        launched.iter().any(|(_, size)| !size.ends_with("as_v5")),
        "the rest on another family: {launched:?}"
    );
    assert_eq!(refused, 0, "no create refused for quota: {launched:?}");

    // Without the check, ARM refuses at least one create before the plugin
    // moves on.
    let (launched, refused) = six_pods_under_quota(false).await;
    assert!(refused >= 1, "{launched:?}");
}
