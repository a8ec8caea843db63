//! End-to-end: the seed's Azure flow with `karpenter controller`, the real
//! azure.wasm and the ARM emulator (`azure-emulator`, HTTPS with its own CA)
//! on a real control plane. The controller authenticates by Azure workload
//! identity against the emulator's token endpoint; each VM the plugin creates
//! registers its Node from the customData, as its kubelet would.
//!
//! Needs a cluster (`KARPENTER_TEST_CLUSTER=NAME`, from `tests/cluster/up`),
//! `make plugins`, and the emulator binary next to this test's
//! (`cargo build -p azure-emulator`, same profile) or at AZURE_EMULATOR_BIN.

use crate::common;

use common::arm::{ArmEmulator, TENANT, vms};
use common::cluster::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};

use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) const CPU_POOL: &str = "azure-cpu-nodepool";
const GPU_POOL: &str = "azure-gpu-nodepool";

pub(crate) fn example(name: &str) -> String {
    repo()
        .join("examples/azure")
        .join(name)
        .to_str()
        .expect("path")
        .to_string()
}

pub(crate) async fn pool_nodes(client: &kube::Client, pool: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .expect("list nodes")
        .items
}

fn label<'a>(node: &'a Node, key: &str) -> &'a str {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

/// Waits until the example's AKSNodeClass is Ready.
pub(crate) async fn node_class_ready(c: &Cluster) {
    wait_for(
        "the AKSNodeClass is Ready",
        Duration::from_secs(60),
        || async {
            let out = kubectl(c, &["get", "aksnodeclass"]);
            let row: Vec<String> = out
                .lines()
                .find(|l| l.starts_with("azure "))
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default();
            if row.get(1).map(String::as_str) == Some("True") {
                Ok(())
            } else {
                Err(out)
            }
        },
    )
    .await;
}

/// A fresh start for an Azure test: the CRDs, nothing left by an earlier
/// run, and a namespace of its own, `e2e-azure-<name>-<pid>`.
pub(crate) async fn prepare(name: &str) -> (Cluster, kube::Client, String) {
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    install_plugin_crds(&c, "azure", &["aksnodeclasses.karpenter.azure.com"]);
    remove_leftovers(&c, &client).await;
    let ns = format!("e2e-azure-{name}-{}", std::process::id());
    namespace(&client, &ns).await;
    (c, client, ns)
}

/// The controller with `plugin` (the emulator's azure plugin, maybe with
/// settings of its own), authenticating by workload identity against the
/// emulator and trusting its CA.
pub(crate) fn controller(c: &Cluster, arm: &ArmEmulator, plugin: PluginSetup) -> Controller {
    let env = arm.identity_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut args = arm.trust_args();
    args.push("--disable-leader-election".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Controller::start_env(c, &[plugin], &env, &args)
}

/// Deletes the CPU pool's NodeClaims and waits until no VM or NodeClaim
/// is left.
pub(crate) async fn delete_cpu_claims(c: &Cluster, client: &kube::Client, arm: &ArmEmulator) {
    kubectl(
        c,
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
            let claims = claims_of(client, CPU_POOL).await.len();
            if vms + claims == 0 {
                Ok(())
            } else {
                Err(format!("{vms} VMs, {claims} NodeClaims"))
            }
        },
    )
    .await;
}

/// A Deployment on the CPU pool, one pod per node (anti-affinity), each
/// asking for `cpu`.
pub(crate) fn one_per_node(ns: &str, app: &str, replicas: u32, cpu: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": CPU_POOL},
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                    ]}},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": cpu}}}]
                }
            }
        }
    })
}

/// The end of a test on the CPU pool: its app scaled to zero, its NodeClaims
/// deleted until no VM or NodeClaim is left, the examples and the namespace
/// removed.
pub(crate) async fn tear_down(
    c: &Cluster,
    client: &kube::Client,
    arm: &ArmEmulator,
    ns: &str,
    app: &str,
) {
    scale(client, ns, app, 0).await;
    delete_cpu_claims(c, client, arm).await;
    for f in ["cpu_nodepool.yaml", "nodeclass.yaml"] {
        kubectl(c, &["delete", "-f", &example(f), "--wait=false"]);
    }
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
}

/// Removes what an earlier, failed run may have left: its namespaces (whose
/// pending pods would make NodeClaims), pools, NodeClaims and Nodes.
pub(crate) async fn remove_leftovers(c: &Cluster, client: &kube::Client) {
    let namespaces = kubectl(c, &["get", "namespaces", "-o", "name"]);
    let old: Vec<&str> = namespaces
        .lines()
        .filter(|n| n.starts_with("namespace/e2e-azure-"))
        .collect();
    for n in &old {
        kubectl(c, &["delete", n, "--wait=false"]);
    }
    for n in &old {
        let ns = n.trim_start_matches("namespace/");
        wait_for(
            "an old namespace's pods gone",
            Duration::from_secs(60),
            || async {
                let left = Api::<Pod>::namespaced(client.clone(), ns)
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .len();
                if left == 0 {
                    Ok(())
                } else {
                    Err(format!("{left} pods in {ns}"))
                }
            },
        )
        .await;
    }
    for pool in [CPU_POOL, GPU_POOL] {
        let _ = Api::<karpenter_controller::crds::NodePool>::all(client.clone())
            .delete(pool, &DeleteParams::default())
            .await;
        if !claims_of(client, pool).await.is_empty() || !pool_nodes(client, pool).await.is_empty() {
            // Their finalizers need a controller; take them off.
            for kind in ["nodeclaims", "nodes"] {
                let names = kubectl(
                    c,
                    &[
                        "get",
                        kind,
                        "-l",
                        &format!("karpenter.sh/nodepool={pool}"),
                        "-o",
                        "name",
                    ],
                );
                for n in names.lines().filter(|l| !l.is_empty()) {
                    let _ = Command::new(&c.kubectl)
                        .args([
                            "patch",
                            n,
                            "--type=merge",
                            "-p",
                            r#"{"metadata":{"finalizers":null}}"#,
                        ])
                        .env("KUBECONFIG", &c.kubeconfig)
                        .output();
                    let _ = Command::new(&c.kubectl)
                        .args(["delete", n, "--wait=false"])
                        .env("KUBECONFIG", &c.kubeconfig)
                        .output();
                }
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn the_seed_azure_flow_on_the_arm_emulator() {
    let _serial = SERIAL.lock().await;
    let (c, client, ns) = prepare("seed").await;

    // The first VM created in zone 1 fails with ZonalAllocationFailed.
    let arm = ArmEmulator::start(&c, &["ZonalAllocationFailed:1"]);
    let controller = controller(&c, &arm, arm.plugin());

    for f in ["nodeclass.yaml", "cpu_nodepool.yaml", "gpu_nodepool.yaml"] {
        kubectl(&c, &["apply", "-f", &example(f)]);
    }
    node_class_ready(&c).await;

    // CPU: 3 pods on a D-family node, after the first zone failed.
    let started = Instant::now();
    kubectl(
        &c,
        &["apply", "-n", &ns, "-f", &example("cpu_deployment.yaml")],
    );
    wait_for("3 CPU pods running", Duration::from_secs(180), || {
        pods_running(&client, &ns, "sample-cpu-app", 3)
    })
    .await;
    eprintln!(
        "CPU pods running {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    let state = arm.state().await;
    assert_eq!(state["injections"], 0, "the ZonalAllocationFailed was hit");
    let cpu_vms = vms(&state);
    assert!(!cpu_vms.is_empty());
    for (name, size, zone) in &cpu_vms {
        assert!(size.starts_with("Standard_D"), "{name}: {size}");
        assert_ne!(zone, "1", "{name} launched in the zone that failed");
    }
    let log = controller.log();
    assert!(
        log.contains("ZonalAllocationFailed") && log.contains("southcentralus-1"),
        "the controller saw the zonal failure"
    );
    // Authenticated by workload identity: a token exchange at the emulator's
    // Entra endpoint, and ARM (which requires a token it issued) answered.
    let requests = ArmEmulator::requests(&state);
    assert!(
        requests
            .iter()
            .any(|r| r == &format!("POST /{TENANT}/oauth2/v2.0/token")),
        "no token exchange: {requests:?}"
    );

    // GPU: one pod on the pinned GPU SKU.
    let started = Instant::now();
    kubectl(
        &c,
        &["apply", "-n", &ns, "-f", &example("gpu_deployment.yaml")],
    );
    wait_for("the GPU pod running", Duration::from_secs(180), || {
        pods_running(&client, &ns, "sample-gpu-app", 1)
    })
    .await;
    eprintln!(
        "GPU pod running {:.1}s after apply",
        started.elapsed().as_secs_f64()
    );
    let gpu_pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("app=sample-gpu-app"))
        .await
        .expect("pods");
    let gpu_node_name = gpu_pods.items[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("bound");
    let gpu_nodes = pool_nodes(&client, GPU_POOL).await;
    let gpu_node = gpu_nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(&gpu_node_name))
        .expect("the GPU pod is on a GPU pool node");
    assert_eq!(
        label(gpu_node, "node.kubernetes.io/instance-type"),
        "Standard_NC24ads_A100_v4"
    );
    assert_eq!(label(gpu_node, "karpenter.azure.com/sku-gpu-name"), "A100");
    let state = arm.state().await;
    assert!(
        vms(&state)
            .iter()
            .any(|(name, size, _)| size == "Standard_NC24ads_A100_v4"
                && gpu_node_name.ends_with(name.rsplit('/').next().unwrap_or_default())),
        "{:?}",
        vms(&state)
    );

    // NodeClaims: every column filled, Ready; their Nodes Ready.
    wait_for("the NodeClaims Ready", Duration::from_secs(60), || async {
        let table = kubectl(&c, &["get", "nodeclaims"]);
        let waiting = table
            .lines()
            .skip(1)
            .filter(|l| l.starts_with(CPU_POOL) || l.starts_with(GPU_POOL))
            .filter(|l| l.split_whitespace().nth(5) != Some("True"))
            .count();
        if waiting == 0 { Ok(()) } else { Err(table) }
    })
    .await;
    let table = kubectl(&c, &["get", "nodeclaims"]);
    eprintln!("{table}");
    let mut rows = 0;
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if !(cols[0].starts_with(CPU_POOL) || cols[0].starts_with(GPU_POOL)) {
            continue;
        }
        rows += 1;
        assert_eq!(cols.len(), 7, "every column filled: {line}");
        assert!(cols[1].starts_with("Standard_"), "TYPE: {line}");
        assert_eq!(cols[2], "on-demand", "{line}");
        assert!(
            cols[3].starts_with("southcentralus-") || cols[3] == "0",
            "ZONE: {line}"
        );
        assert!(cols[4].starts_with("aks-"), "NODE: {line}");
        assert_eq!(cols[5], "True", "READY: {line}");
    }
    assert_eq!(rows, vms(&state).len(), "one NodeClaim per VM");
    for pool in [CPU_POOL, GPU_POOL] {
        let nodes = pool_nodes(&client, pool).await;
        assert!(!nodes.is_empty(), "{pool} has nodes");
        for n in &nodes {
            assert!(node_ready(n), "{:?} is Ready", n.metadata.name);
            let taints = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            assert!(
                !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"
                    || t.key == "node.cilium.io/agent-not-ready"),
                "{:?}: {taints:?}",
                n.metadata.name
            );
        }
    }

    // Scale to zero, then the NodeClaims go (what emptiness consolidation or
    // `kubectl delete nodeclaim` does): VMs and NICs leave the emulator.
    scale(&client, &ns, "sample-cpu-app", 0).await;
    scale(&client, &ns, "sample-gpu-app", 0).await;
    wait_for("pods gone", Duration::from_secs(90), || async {
        let left = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} pods"))
        }
    })
    .await;
    for pool in [CPU_POOL, GPU_POOL] {
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
        "no VM, NIC, NodeClaim or Node left",
        Duration::from_secs(120),
        || async {
            let state = arm.state().await;
            let (vms, nics) = (
                state["vms"].as_array().map_or(0, Vec::len),
                state["nics"].as_array().map_or(0, Vec::len),
            );
            let claims =
                claims_of(&client, CPU_POOL).await.len() + claims_of(&client, GPU_POOL).await.len();
            let nodes = pool_nodes(&client, CPU_POOL).await.len()
                + pool_nodes(&client, GPU_POOL).await.len();
            if vms + nics + claims + nodes == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{vms} VMs, {nics} NICs, {claims} NodeClaims, {nodes} Nodes"
                ))
            }
        },
    )
    .await;
    let requests = ArmEmulator::requests(&arm.state().await);
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("DELETE ") && r.contains("/networkInterfaces/"))
    );

    for f in ["cpu_nodepool.yaml", "gpu_nodepool.yaml", "nodeclass.yaml"] {
        kubectl(&c, &["delete", "-f", &example(f), "--wait=false"]);
    }
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await;
    drop(controller);
}
