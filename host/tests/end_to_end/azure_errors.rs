//! End-to-end: every error ARM answers a create with reaches the user under
//! one reason. The emulator answers one create at a time with ARM's code,
//! status and body; the NodeClaim shows the reason (its Launched condition
//! for an error the same NodeClaim may retry, its event when it gives way
//! to another offering), the pod it was made for gets a `LaunchFailed`
//! event naming it, and `karpenter_cloudprovider_errors_total` counts it.
//!
//! Needs what `azure_cluster` needs.

use crate::azure_cluster::{
    CPU_POOL, controller, delete_cpu_claims, example, node_class_ready, prepare,
};
use crate::common;

use common::arm::ArmEmulator;
use common::cluster::*;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};
use std::time::Duration;

/// How a case is set up on the emulator, and the reason it must show.
struct Case {
    admin: &'static str,
    body: Value,
    reason: &'static str,
    /// The NodeClaim gives way to another offering (insufficient capacity)
    /// rather than retrying.
    gives_way: bool,
}

fn cases() -> Vec<Case> {
    let inject = |code: &str| json!({"code": code, "count": 1});
    let quota = "Operation could not be completed as it results in exceeding approved standardDASv5Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: southcentralus, Current Limit: 16, Current Usage: 16, Additional Required: 2, (Minimum) New Limit Required: 18. Submit a request for Quota increase at https://aka.ms/ProdportalCRP. Family Cores quota exceeded.";
    vec![
        Case {
            admin: "inject",
            body: inject("ZonalAllocationFailed"),
            reason: "ZonalAllocationFailed",
            gives_way: true,
        },
        Case {
            admin: "inject",
            body: inject("AllocationFailed"),
            reason: "AllocationFailed",
            gives_way: true,
        },
        Case {
            admin: "inject",
            body: inject("OverconstrainedAllocationRequest"),
            reason: "OverconstrainedAllocationRequest",
            gives_way: true,
        },
        Case {
            admin: "inject",
            body: inject("SkuNotAvailable"),
            reason: "SKUNotAvailable",
            gives_way: true,
        },
        Case {
            admin: "inject",
            body: json!({"code": "OperationNotAllowed", "status": 409, "message": quota, "count": 1}),
            reason: "SKUFamilyQuotaExceeded",
            gives_way: true,
        },
        Case {
            admin: "inject",
            body: inject("SubnetIsFull"),
            reason: "SubnetFull",
            gives_way: false,
        },
        Case {
            admin: "inject",
            body: inject("GalleryImageNotFound"),
            reason: "ImageNotFound",
            gives_way: false,
        },
        Case {
            admin: "inject",
            body: inject("AuthorizationFailed"),
            reason: "AuthorizationFailed",
            gives_way: false,
        },
        Case {
            admin: "inject",
            body: inject("LinkedAuthorizationFailed"),
            reason: "AuthorizationFailed",
            gives_way: false,
        },
        Case {
            admin: "fault",
            body: json!({"status": 429, "retryAfter": 0, "method": "PUT", "path": "/virtualMachines/", "count": 5}),
            reason: "Throttled",
            gives_way: false,
        },
    ]
}

fn deployment(ns: &str, app: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app, "e2e": "errors"}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": CPU_POOL},
                    // A node of its own each, so every case launches.
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"e2e": "errors"}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": "1"}}}]
                }
            }
        }
    })
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn every_arm_create_error_shows_its_reason() {
    let _serial = SERIAL.lock().await;
    let (c, client, ns) = prepare("errors").await;
    let arm = ArmEmulator::start(&c, &[]);
    let controller = controller(&c, &arm, arm.plugin());
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml"] {
        kubectl(&c, &["apply", "-f", &example(f)]);
    }
    node_class_ready(&c).await;

    let mut shown = Vec::new();
    for (i, case) in cases().into_iter().enumerate() {
        let app = format!("err-{i}");
        arm.admin(case.admin, case.body.clone()).await;
        let applied = std::time::Instant::now();
        apply(&c, deployment(&ns, &app));
        // The pod is told, naming the reason.
        let pod_event = wait_for_value(
            &format!("{}: the pod's LaunchFailed event", case.reason),
            Duration::from_secs(90),
            || async {
                events(&client, Some(&ns), "LaunchFailed")
                    .await
                    .into_iter()
                    .find(|(pod, m)| pod.starts_with(&app) && m.contains(case.reason))
                    .map(|(_, m)| m)
                    .ok_or_else(|| "not yet".to_string())
            },
        )
        .await;
        // The NodeClaim shows it.
        let on_claim = if case.gives_way {
            wait_for_value(
                &format!("{}: the NodeClaim's event", case.reason),
                Duration::from_secs(30),
                || async {
                    events(&client, None, "InsufficientCapacityError")
                        .await
                        .into_iter()
                        .find(|(_, m)| m.contains(case.reason))
                        .map(|(_, m)| m)
                        .ok_or_else(|| "not yet".to_string())
                },
            )
            .await
        } else {
            wait_for_value(
                &format!("{}: Launched=False on the NodeClaim", case.reason),
                Duration::from_secs(30),
                || async {
                    claims_of(&client, CPU_POOL)
                        .await
                        .into_iter()
                        .find_map(|nc| {
                            let cond = nc.condition("Launched")?;
                            (cond.status == "False" && cond.reason == case.reason)
                                .then(|| format!("{}: {}", nc.name_any(), cond.message))
                        })
                        .ok_or_else(|| "not yet".to_string())
                },
            )
            .await
        };
        eprintln!(
            "{}\n  pod:       {pod_event}\n  NodeClaim: {on_claim}",
            case.reason
        );
        if case.gives_way {
            // The pod runs on the next offering.
            wait_for(
                &format!("{}: the pod runs elsewhere", case.reason),
                Duration::from_secs(120),
                || pods_running(&client, &ns, &app, 1),
            )
            .await;
            eprintln!(
                "  the pod runs on another offering {:.1} s after it was made",
                applied.elapsed().as_secs_f64()
            );
        } else {
            // Its NodeClaim would launch on its retry; leave no retry to
            // take the next case's error.
            kubectl(
                &c,
                &["delete", "deployment", &app, "-n", &ns, "--wait=false"],
            );
            for nc in claims_of(&client, CPU_POOL).await {
                if !nc.is_true("Launched") {
                    kubectl(&c, &["delete", "nodeclaim", &nc.name_any(), "--wait=false"]);
                }
            }
        }
        shown.push(case.reason);
    }

    // Each reason is counted under its code.
    let url = format!("http://127.0.0.1:{}/metrics", controller.metrics);
    let text = reqwest::get(&url)
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    for reason in &shown {
        let want = if [
            "ZonalAllocationFailed",
            "AllocationFailed",
            "OverconstrainedAllocationRequest",
            "SKUNotAvailable",
            "SKUFamilyQuotaExceeded",
        ]
        .contains(reason)
        {
            // The contract's insufficient-capacity carries no code of its
            // own: these count under its name, their code in the message.
            "InsufficientCapacity"
        } else {
            reason
        };
        assert!(
            text.lines()
                .any(|l| l.starts_with("karpenter_cloudprovider_errors_total{")
                    && l.contains("provider=\"azure\"")
                    && l.contains("method=\"create\"")
                    && l.contains(&format!("code=\"{want}\""))),
            "no karpenter_cloudprovider_errors_total for {want}:\n{}",
            text.lines()
                .filter(|l| l.starts_with("karpenter_cloudprovider_errors"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    delete_cpu_claims(&c, &client, &arm).await;
    for f in ["cpu_nodepool.yaml", "nodeclass.yaml"] {
        kubectl(&c, &["delete", "-f", &example(f), "--wait=false"]);
    }
    drop(controller);
}
