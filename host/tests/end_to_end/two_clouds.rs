//! Both clouds in one controller, as in the AKS Flex guide: one
//! `karpenter controller` loads azure.wasm and nebius.wasm, the cluster has
//! the Azure and the Nebius NodePools side by side, and each workload lands
//! in the cloud its NodePool allows. The ARM emulator (HTTPS, workload
//! identity) and the Nebius emulator (gRPC over h2c) each play their VMs'
//! kubelets.
//!
//!     tests/cluster/up e2e && make plugins && cargo build -p azure-emulator
//!     KARPENTER_TEST_CLUSTER=e2e cargo test -p karpenter-host --test end_to_end -- --ignored --nocapture two_clouds::

use crate::common;

use common::arm::{self, ArmEmulator};
use common::cluster::*;
use common::nebius;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_controller::crds::NodeClaim;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use std::collections::BTreeMap;
use std::time::Duration;

const AZURE_NS: &str = "e2e-flex-azure";
const NEBIUS_NS: &str = "e2e-flex-nebius";
const EITHER_NS: &str = "e2e-flex-either";
const AZURE_POOLS: [&str; 2] = ["azure-cpu-nodepool", "azure-gpu-nodepool"];
const NEBIUS_POOLS: [&str; 2] = ["nebius-cpu-nodepool", "nebius-gpu-nodepool"];

/// The cloud a providerID names.
fn cloud_of(provider_id: &str) -> &'static str {
    if provider_id.starts_with("azure://") {
        "azure"
    } else if provider_id.starts_with("aks-nebius://") {
        "nebius"
    } else {
        "unknown"
    }
}

fn cloud_of_pool(pool: &str) -> &'static str {
    if AZURE_POOLS.contains(&pool) {
        "azure"
    } else if NEBIUS_POOLS.contains(&pool) {
        "nebius"
    } else {
        "unknown"
    }
}

async fn node_class_ready(c: &Cluster, kind: &str, name: &str) -> Result<(), String> {
    let out = kubectl(c, &["get", kind, name, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    let ready = v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    if ready {
        Ok(())
    } else {
        Err(v["status"].to_string())
    }
}

/// Where each pod of `ns` runs: (pod, NodePool, cloud by providerID).
async fn placements(client: &kube::Client, ns: &str) -> Vec<(String, String, String)> {
    let nodes: BTreeMap<String, Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes")
        .items
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("pods");
    pods.items
        .iter()
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let n = nodes.get(&node);
            let pool = n
                .and_then(|n| {
                    n.metadata
                        .labels
                        .as_ref()?
                        .get("karpenter.sh/nodepool")
                        .cloned()
                })
                .unwrap_or_default();
            let id = n
                .and_then(|n| n.spec.as_ref()?.provider_id.clone())
                .unwrap_or_default();
            (
                p.metadata.name.clone().unwrap_or_default(),
                pool,
                cloud_of(&id).to_string(),
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER, `make plugins` and the azure-emulator binary"]
async fn azure_and_nebius_pools_in_one_controller() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    install_plugin_crds(&c, "azure", &["aksnodeclasses.karpenter.azure.com"]);
    install_plugin_crds(&c, "nebius", &["nebiusnodeclasses.flex.aks.azure.com"]);

    let arm = ArmEmulator::start(&c, &[]);
    let (nebius, nebius_addr, _server) = nebius::emulator(&c).await;
    let env = arm.identity_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut args = arm.trust_args();
    args.push("--disable-leader-election".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let controller = Controller::start_env(
        &c,
        &[arm.plugin(), nebius::nebius_plugin(&nebius_addr)],
        &env,
        &args,
    );

    for cloud in ["azure", "nebius"] {
        for f in ["nodeclass.yaml", "cpu_nodepool.yaml", "gpu_nodepool.yaml"] {
            kubectl(&c, &["apply", "-f", &example(cloud, f)]);
        }
    }
    wait_for(
        "both NodeClasses Ready",
        Duration::from_secs(60),
        || async {
            node_class_ready(&c, "aksnodeclass", "azure").await?;
            node_class_ready(&c, "nebiusnodeclass", "nebius").await
        },
    )
    .await;
    let pools = kubectl(&c, &["get", "nodepools"]);
    eprintln!("{pools}");

    // The guide's workloads, each cloud's in its own namespace (their
    // Deployments share names), plus one that either CPU pool may take. As
    // in the guide, the CPU workloads first, then the GPU ones.
    for ns in [AZURE_NS, NEBIUS_NS, EITHER_NS] {
        namespace(&client, ns).await;
    }
    let mut either = deployment(EITHER_NS, "either", "unused", 1, "1", false);
    either["spec"]["template"]["spec"]
        .as_object_mut()
        .expect("pod spec")
        .remove("nodeSelector");
    either["spec"]["template"]["spec"]["affinity"] = serde_json::json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In",
                                   "values": ["azure-cpu-nodepool", "nebius-cpu-nodepool"]}]}]}}
    });
    for (file, apps) in [
        (
            "cpu_deployment.yaml",
            [
                (AZURE_NS, "sample-cpu-app", 3),
                (NEBIUS_NS, "sample-cpu-app", 1),
            ],
        ),
        (
            "gpu_deployment.yaml",
            [
                (AZURE_NS, "sample-gpu-app", 1),
                (NEBIUS_NS, "sample-gpu-app", 1),
            ],
        ),
    ] {
        kubectl(
            &c,
            &["apply", "-n", AZURE_NS, "-f", &example("azure", file)],
        );
        kubectl(
            &c,
            &["apply", "-n", NEBIUS_NS, "-f", &example("nebius", file)],
        );
        if file.starts_with("cpu") {
            apply(&c, either.clone());
        }
        let started = std::time::Instant::now();
        for (ns, app, want) in apps {
            wait_for(
                &format!("{ns}/{app} running"),
                Duration::from_secs(240),
                || pods_running(&client, ns, app, want),
            )
            .await;
        }
        eprintln!(
            "{file}: pods running {:.1}s after apply",
            started.elapsed().as_secs_f64()
        );
    }
    wait_for("the either pod running", Duration::from_secs(60), || {
        pods_running(&client, EITHER_NS, "either", 1)
    })
    .await;
    eprintln!("{}", kubectl(&c, &["get", "nodeclaims"]));

    // Each pod in the cloud its NodePool allows, and each Node in the cloud
    // of its NodePool.
    for (ns, allowed) in [
        (AZURE_NS, &AZURE_POOLS[..]),
        (NEBIUS_NS, &NEBIUS_POOLS[..]),
        (
            EITHER_NS,
            &["azure-cpu-nodepool", "nebius-cpu-nodepool"][..],
        ),
    ] {
        for (pod, pool, cloud) in placements(&client, ns).await {
            eprintln!("{ns}/{pod}: {pool} ({cloud})");
            assert!(allowed.contains(&pool.as_str()), "{ns}/{pod} on {pool}");
            assert_eq!(cloud, cloud_of_pool(&pool), "{ns}/{pod}: {pool} in {cloud}");
        }
    }

    // One VM per NodeClaim in each cloud: no claim was launched in the other
    // cloud, none twice. An emulated VM registers its Node as soon as it is
    // created, so a pod may run before its NodeClaim's status names the VM.
    let claims_api = Api::<NodeClaim>::all(client.clone());
    wait_for(
        "every NodeClaim launched",
        Duration::from_secs(60),
        || async {
            let claims = claims_api
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            match claims.items.iter().find(|nc| nc.provider_id().is_none()) {
                Some(nc) => Err(format!("{} has no providerID yet", nc.name_any())),
                None => Ok(()),
            }
        },
    )
    .await;
    let claims: Vec<NodeClaim> = claims_api
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    let count = |pools: &[&str]| {
        claims
            .iter()
            .filter(|nc| nc.node_pool().is_some_and(|p| pools.contains(&p)))
            .inspect(|nc| {
                let id = nc.provider_id().unwrap_or_default();
                let pool = nc.node_pool().unwrap_or_default();
                assert_eq!(cloud_of(id), cloud_of_pool(pool), "{:?}", nc.metadata.name);
            })
            .count()
    };
    let (azure_claims, nebius_claims) = (count(&AZURE_POOLS), count(&NEBIUS_POOLS));
    let azure_vms = arm::vms(&arm.state().await).len();
    assert_eq!(azure_vms, azure_claims, "Azure VMs and NodeClaims");
    assert_eq!(
        nebius.instances().len(),
        nebius_claims,
        "Nebius instances and NodeClaims"
    );
    // Every pool launched in its own cloud.
    for pool in AZURE_POOLS.iter().chain(&NEBIUS_POOLS) {
        assert!(
            claims.iter().any(|nc| nc.node_pool() == Some(*pool)),
            "no NodeClaim of {pool}"
        );
    }

    // Scale to zero; the NodeClaims go (what emptiness consolidation does):
    // nothing left in either cloud.
    for ns in [AZURE_NS, NEBIUS_NS, EITHER_NS] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    wait_for("workloads gone", Duration::from_secs(120), || async {
        let mut left = 0;
        for ns in [AZURE_NS, NEBIUS_NS, EITHER_NS] {
            left += Api::<Pod>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .len();
        }
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} pods"))
        }
    })
    .await;
    let all_pools: Vec<&str> = AZURE_POOLS.iter().chain(&NEBIUS_POOLS).copied().collect();
    for pool in &all_pools {
        kubectl(
            &c,
            &[
                "delete",
                "nodeclaims",
                "-l",
                &format!("karpenter.sh/nodepool={pool}"),
                "--wait=false",
            ],
        );
    }
    wait_for(
        "no VM, NIC, instance, disk, NodeClaim or Node left",
        Duration::from_secs(180),
        || async {
            let state = arm.state().await;
            let vms = state["vms"].as_array().map_or(0, Vec::len);
            let nics = state["nics"].as_array().map_or(0, Vec::len);
            let (instances, disks) = (nebius.instances().len(), nebius.disks().len());
            let mut claims = 0;
            let mut nodes = 0;
            for pool in &all_pools {
                claims += claims_of(&client, pool).await.len();
                nodes += kwok_nodes(&client, pool).await.len();
            }
            if vms + nics + instances + disks + claims + nodes == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{vms} VMs, {nics} NICs, {instances} instances, {disks} disks, {claims} NodeClaims, {nodes} Nodes"
                ))
            }
        },
    )
    .await;
    for cloud in ["azure", "nebius"] {
        for f in ["cpu_nodepool.yaml", "gpu_nodepool.yaml", "nodeclass.yaml"] {
            kubectl(
                &c,
                &[
                    "delete",
                    "-f",
                    &example(cloud, f),
                    "--ignore-not-found",
                    "--wait=false",
                ],
            );
        }
    }
    drop(controller);
}
