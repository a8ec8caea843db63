//! End-to-end: Azure launches within the subscription's vCPU quota. With
//! the cheapest family (DASv5) at 16 vCPUs and six 4-CPU pods, one per
//! node, the plugin reads the usages before it launches: that family takes
//! VMs up to its quota and the next cheapest family takes the rest, with no
//! VM create refused. The same run with `QUOTA_CHECK=false` counts the creates ARM
//! refuses when the plugin learns of quota only by failing.
//!
//! Needs what `azure_cluster` needs.

use crate::azure_cluster::{CPU_POOL, controller, example, node_class_ready, prepare};
use crate::common;

use common::arm::{ArmEmulator, vms};
use common::cluster::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
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
    apply(
        &c,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": APP, "namespace": ns},
            "spec": {
                "replicas": 6,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "nodeSelector": {"karpenter.sh/nodepool": CPU_POOL},
                        // One per VM: six VMs of 8 vCPUs are asked for.
                        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": APP}}, "topologyKey": "kubernetes.io/hostname"}
                        ]}},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"requests": {"cpu": "4"}}}]
                    }
                }
            }
        }),
    );
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

    scale(&client, &ns, APP, 0).await;
    kubectl(
        &c,
        &[
            "delete",
            "nodeclaims",
            "-l",
            &format!("karpenter.sh/nodepool={CPU_POOL}"),
            "--wait=false",
        ],
    );
    wait_for(
        "no VM or NodeClaim left",
        Duration::from_secs(120),
        || async {
            let vms = arm.state().await["vms"].as_array().map_or(0, Vec::len);
            let claims = claims_of(&client, CPU_POOL).await.len();
            if vms + claims == 0 {
                Ok(())
            } else {
                Err(format!("{vms} VMs, {claims} NodeClaims"))
            }
        },
    )
    .await;
    for f in ["cpu_nodepool.yaml", "nodeclass.yaml"] {
        kubectl(&c, &["delete", "-f", &example(f), "--wait=false"]);
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
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
