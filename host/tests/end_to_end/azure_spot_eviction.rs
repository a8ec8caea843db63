//! End-to-end: a spot VM's eviction. The emulator gives the Node the notice
//! Azure's Scheduled Events give (the node-problem-detector's
//! `PreemptionScheduled=True` condition, NotBefore 30 s ahead) and deletes
//! the VM at NotBefore. The controller taints and drains the node at once,
//! the pods run on a replacement before the VM is gone, the replacement is
//! not the spot offering (size and zone) that was just evicted, and the
//! drained VM is deleted before Azure would evict it. Then, with a
//! PodDisruptionBudget allowing no eviction, the drain waits for the budget
//! until the notice ends and deletes the pod then.
//!
//! Needs what `azure_cluster` needs.

use crate::azure_cluster::{
    CPU_POOL, controller, example, node_class_ready, one_per_node, prepare, tear_down,
};
use crate::common;

use common::arm::{ArmEmulator, vms};
use common::cluster::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::json;
use std::time::{Duration, Instant};

const APP: &str = "spot-app";
const NOTICE_SECONDS: u64 = 30;

async fn app_pods(client: &kube::Client, ns: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={APP}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && p.metadata.deletion_timestamp.is_none()
}

/// (size, zone) of a node.
async fn offering(client: &kube::Client, node: &str) -> (String, String) {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node");
    let l = n.metadata.labels.unwrap_or_default();
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    (
        get("node.kubernetes.io/instance-type"),
        get("topology.kubernetes.io/zone"),
    )
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn an_evicted_spot_node_is_drained_and_replaced_before_the_vm_goes() {
    let _serial = SERIAL.lock().await;
    let (c, client, ns) = prepare("spot").await;
    let arm = ArmEmulator::start(&c, &[]);
    let controller = controller(&c, &arm, arm.plugin());
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml"] {
        kubectl(&c, &["apply", "-f", &example(f)]);
    }
    let spot = json!([{"op": "replace", "path": "/spec/template/spec/requirements/2/values",
                       "value": ["spot"]}])
    .to_string();
    kubectl(
        &c,
        &["patch", "nodepool", CPU_POOL, "--type=json", "-p", &spot],
    );
    node_class_ready(&c).await;
    apply(&c, one_per_node(&ns, APP, 2, "2"));
    wait_for("2 pods running", Duration::from_secs(300), || {
        pods_running(&client, &ns, APP, 2)
    })
    .await;
    let pods = app_pods(&client, &ns).await;
    let before: Vec<String> = pods.iter().filter_map(node_of).collect();
    let victim = before.first().cloned().expect("a pod's node");
    let evicted = offering(&client, &victim).await;

    let noticed = Instant::now();
    arm.admin(
        "evict",
        json!({"vm": victim, "noticeSeconds": NOTICE_SECONDS}),
    )
    .await;
    // Every pod running on a node other than the victim, while its VM is
    // still there.
    wait_for(
        "the pods running elsewhere",
        Duration::from_secs(NOTICE_SECONDS),
        || async {
            let pods = app_pods(&client, &ns).await;
            let moved = pods
                .iter()
                .filter(|p| running(p) && node_of(p).is_some_and(|n| n != victim))
                .count();
            if moved == 2 {
                Ok(())
            } else {
                Err(format!("{moved} of 2 pods running off {victim}"))
            }
        },
    )
    .await;
    let moved_after = noticed.elapsed();
    let state = arm.state().await;
    assert_eq!(
        state["evicted"], 0,
        "the pods moved before the VM was evicted: {state}"
    );
    eprintln!(
        "pods running elsewhere {:.1}s after the eviction notice ({NOTICE_SECONDS}s of notice)",
        moved_after.as_secs_f64()
    );
    let interrupted = events(&client, None, "SpotInterrupted").await;
    assert!(
        interrupted
            .iter()
            .any(|(name, message)| name == &victim && message.contains("PreemptionScheduled=True")),
        "{interrupted:?}"
    );
    // The replacement is not what was just evicted.
    let replacements: Vec<String> = app_pods(&client, &ns)
        .await
        .iter()
        .filter_map(node_of)
        .filter(|n| !before.contains(n))
        .collect();
    assert_eq!(replacements.len(), 1, "{replacements:?}");
    let replacement = offering(&client, &replacements[0]).await;
    eprintln!("evicted {evicted:?}, replaced by {replacement:?}");
    assert_ne!(
        replacement, evicted,
        "the evicted spot offering is kept out"
    );

    // The drained node's VM is deleted by the controller, at NotBefore by
    // Azure at the latest.
    wait_for(
        "the VM and its NodeClaim gone",
        Duration::from_secs(NOTICE_SECONDS + 60),
        || async {
            let state = arm.state().await;
            let vm = vms(&state)
                .iter()
                .any(|(key, _, _)| key.ends_with(&format!("/{victim}")));
            let claims = claims_of(&client, CPU_POOL).await;
            let claim = claims.iter().any(|c| {
                c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(victim.as_str())
            });
            if !vm && !claim {
                Ok(())
            } else {
                Err(format!(
                    "VM {victim} there: {vm}, its NodeClaim there: {claim}"
                ))
            }
        },
    )
    .await;
    eprintln!(
        "VM and NodeClaim gone {:.1}s after the notice",
        noticed.elapsed().as_secs_f64()
    );
    // A PodDisruptionBudget that allows no eviction holds the drain until
    // the notice ends, not past it.
    apply(
        &c,
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": APP, "namespace": ns},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": APP}}}}),
    );
    let victim = replacements[0].clone();
    let noticed = Instant::now();
    arm.admin(
        "evict",
        json!({"vm": victim, "noticeSeconds": NOTICE_SECONDS}),
    )
    .await;
    wait_for(
        "the PDB-held pod leaving at the deadline",
        Duration::from_secs(NOTICE_SECONDS + 30),
        || async {
            let on_victim = app_pods(&client, &ns)
                .await
                .into_iter()
                .filter(|p| node_of(p).as_deref() == Some(victim.as_str()) && running(p))
                .count();
            if on_victim == 0 {
                Ok(())
            } else {
                Err(format!("{on_victim} pod on {victim}"))
            }
        },
    )
    .await;
    let left_after = noticed.elapsed().as_secs_f64();
    eprintln!(
        "with a PDB allowing no eviction, the pod left {left_after:.1}s after a {NOTICE_SECONDS}s notice"
    );
    assert!(
        left_after >= NOTICE_SECONDS as f64 - 3.0 && left_after <= NOTICE_SECONDS as f64 + 10.0,
        "the PDB held the pod until the deadline, not past it: it left after {left_after:.1}s"
    );
    wait_for("2 pods running again", Duration::from_secs(120), || {
        pods_running(&client, &ns, APP, 2)
    })
    .await;
    tear_down(&c, &client, &arm, &ns, APP).await;
    drop(controller);
}
