//! End to end on the local control plane with the Nebius plugin: the
//! controller process loads target/plugins/nebius.wasm, which speaks gRPC
//! (h2c) to the Nebius emulator running in this test; each instance's
//! kubelet (played by the emulator) registers its Node from the cloud-init
//! the plugin wrote.
//!
//!     tests/cluster/up e2e && make plugins
//!     KARPENTER_TEST_CLUSTER=e2e cargo test -p karpenter-host --test end_to_end -- --ignored --nocapture nebius::

use crate::common;

use common::cluster::{self as e2e, Cluster, Controller, SERIAL};
use common::nebius::{HUB_ADDRESS, emulator, nebius_plugin};
use k8s_openapi::api::core::v1::{Event, Node};
use karpenter_controller::crds::NodeClaim;
use kube::api::{Api, DeleteParams, ListParams};
use nebius_emulator::Emulator;
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

fn setup_crds(c: &Cluster) {
    e2e::install_crds(c);
    e2e::install_plugin_crds(c, "nebius", &["nebiusnodeclasses.flex.aks.azure.com"]);
}

fn example(name: &str) -> String {
    e2e::repo()
        .join("examples/nebius")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

async fn nodes_of(client: &kube::Client, pool: &str) -> Vec<Node> {
    e2e::kwok_nodes(client, pool).await
}

fn internal_ip(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn claim_ready(nc: &NodeClaim) -> bool {
    nc.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

fn claim_type(nc: &NodeClaim) -> String {
    nc.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("node.kubernetes.io/instance-type"))
        .cloned()
        .unwrap_or_default()
}

/// Deletes the pools' NodeClaims (what emptiness consolidation does) and
/// waits until the emulator holds no instance or disk and the Nodes are gone.
async fn scale_to_zero(client: &kube::Client, emulator: &Emulator, pools: &[&str]) {
    let api = Api::<NodeClaim>::all(client.clone());
    for pool in pools {
        let _ = api
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")),
            )
            .await;
    }
    e2e::wait_for(
        "instances and disks deleted",
        Duration::from_secs(120),
        || async {
            let mut nodes = 0;
            let mut claims = 0;
            for pool in pools {
                nodes += nodes_of(client, pool).await.len();
                claims += e2e::claims_of(client, pool).await.len();
            }
            let (instances, disks) = (emulator.instances().len(), emulator.disks().len());
            if nodes + claims + instances + disks == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{claims} NodeClaims, {nodes} Nodes, {instances} instances, {disks} disks left"
                ))
            }
        },
    )
    .await;
}

/// The seed's Nebius flow: NodeClass, CPU and GPU NodePools, the CPU and GPU
/// deployments; NodeClaims of the seed's types, Ready Nodes on WireGuard
/// addresses, Running pods; then scale to zero.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER, from tests/cluster/up, and `make plugins`"]
async fn seed_flow_cpu_and_gpu_nodes() {
    let _serial = SERIAL.lock().await;
    let c = e2e::cluster();
    let client = e2e::client(&c).await;
    setup_crds(&c);
    let (emulator, addr, _server) = emulator(&c).await;
    let controller = Controller::start_plugins(&c, &[nebius_plugin(&addr)], &[]);
    let ns = "nebius-seed";
    e2e::namespace(&client, ns).await;
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml", "gpu_nodepool.yaml"] {
        e2e::kubectl(&c, &["apply", "-f", &example(f)]);
    }
    e2e::wait_for("NebiusNodeClass Ready", Duration::from_secs(60), || async {
        let out = e2e::kubectl(&c, &["get", "nebiusnodeclass", "nebius", "-o", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
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
    })
    .await;
    let columns = e2e::kubectl(&c, &["get", "nebiusnodeclass"]);
    assert!(
        columns.starts_with("NAME") && columns.contains("READY"),
        "{columns}"
    );

    // As the guide does: the CPU workload first, then the GPU one.
    for (file, pool, app, want) in [
        (
            "cpu_deployment.yaml",
            "nebius-cpu-nodepool",
            "sample-cpu-app",
            "cpu-d3-16vcpu-64gb",
        ),
        (
            "gpu_deployment.yaml",
            "nebius-gpu-nodepool",
            "sample-gpu-app",
            "gpu-h100-sxm-8gpu-128vcpu-1600gb",
        ),
    ] {
        e2e::kubectl(&c, &["apply", "-n", ns, "-f", &example(file)]);
        e2e::wait_for(&format!("{app} Running"), Duration::from_secs(120), || {
            e2e::pods_running(&client, ns, app, 1)
        })
        .await;
        let claims = e2e::claims_of(&client, pool).await;
        assert_eq!(claims.len(), 1, "{pool}");
        assert_eq!(claim_type(&claims[0]), want);
        e2e::wait_for(
            &format!("{pool} NodeClaim Ready"),
            Duration::from_secs(60),
            || async {
                let claims = e2e::claims_of(&client, pool).await;
                if claims.iter().all(claim_ready) {
                    Ok(())
                } else {
                    Err("not Ready".into())
                }
            },
        )
        .await;
        let nodes = nodes_of(&client, pool).await;
        assert_eq!(nodes.len(), 1);
        let n = &nodes[0];
        assert!(is_ready(n));
        let name = n.metadata.name.clone().unwrap_or_default();
        assert!(name.starts_with("computeinstance-"), "{name}");
        let ip = internal_ip(n).expect("InternalIP");
        assert!(
            ip.starts_with("100.96."),
            "the WireGuard address is the node IP: {ip}"
        );
        assert_ne!(ip, HUB_ADDRESS);
    }
    let out = e2e::kubectl(&c, &["get", "nodeclaims"]);
    eprintln!("{out}");
    assert!(out.contains("cpu-d3-16vcpu-64gb") && out.contains("gpu-h100-sxm-8gpu-128vcpu-1600gb"));
    assert_eq!(emulator.disks().len(), 2, "{:?}", emulator.disks());

    for app in ["sample-cpu-app", "sample-gpu-app"] {
        e2e::scale(&client, ns, app, 0).await;
    }
    scale_to_zero(
        &client,
        &emulator,
        &["nebius-cpu-nodepool", "nebius-gpu-nodepool"],
    )
    .await;
    e2e::clean_up(&client, ns, "nebius-cpu-nodepool").await;
    e2e::clean_up(&client, ns, "nebius-gpu-nodepool").await;
    e2e::kubectl(
        &c,
        &["delete", "nebiusnodeclass", "nebius", "--ignore-not-found"],
    );
    drop(controller);
}

/// 50 launches at once on a /26 (61 free addresses once the hub's is out):
/// distinct node IPs; growing to 70 pods fills the range and the launches
/// beyond it fail with an InsufficientCapacityError event naming the range.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER, from tests/cluster/up, and `make plugins`"]
async fn wireguard_addresses_at_scale() {
    let _serial = SERIAL.lock().await;
    let c = e2e::cluster();
    let client = e2e::client(&c).await;
    setup_crds(&c);
    let (emulator, addr, _server) = emulator(&c).await;
    let controller = Controller::start_plugins(&c, &[nebius_plugin(&addr)], &[]);
    let (ns, pool) = ("nebius-wg", "nebius-wg");
    e2e::namespace(&client, ns).await;
    e2e::apply(
        &c,
        json!({
            "apiVersion": "flex.aks.azure.com/v1alpha1",
            "kind": "NebiusNodeClass",
            "metadata": {"name": "nebius-wg"},
            "spec": {"projectID": "project-e00wg", "region": "eu-north1", "subnetID": "vpcsubnet-e00wg",
                     "wireguardPeerCIDR": "100.96.0.0/26"}
        }),
    );
    let mut np = e2e::node_pool(
        pool,
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["cpu-d3-4vcpu-16gb"]},
               {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    );
    np["spec"]["template"]["spec"]["nodeClassRef"] =
        json!({"group": "flex.aks.azure.com", "kind": "NebiusNodeClass", "name": "nebius-wg"});
    e2e::apply(&c, np);
    // One pod per node: every pod is its own launch.
    e2e::apply(&c, e2e::deployment(ns, "spread", pool, 50, "1", true));
    e2e::wait_for("50 pods Running", Duration::from_secs(180), || {
        e2e::pods_running(&client, ns, "spread", 50)
    })
    .await;
    // Every launch got its own address (the provisioner may launch a few
    // more nodes than pods; each of them counts as well).
    let ips: Vec<String> = nodes_of(&client, pool)
        .await
        .iter()
        .filter_map(internal_ip)
        .collect();
    let distinct: HashSet<&String> = ips.iter().collect();
    assert!(ips.len() >= 50, "{} nodes", ips.len());
    assert_eq!(distinct.len(), ips.len(), "{ips:?}");
    assert!(
        ips.iter()
            .all(|ip| ip.starts_with("100.96.0.") && ip != HUB_ADDRESS)
    );
    eprintln!(
        "{} nodes, {} distinct WireGuard addresses",
        ips.len(),
        distinct.len()
    );

    // More pods than the range has addresses: it fills up, and the launches
    // beyond it fail with an event that names the range.
    e2e::scale(&client, ns, "spread", 70).await;
    e2e::wait_for("an exhaustion event", Duration::from_secs(120), || async {
        let events = Api::<Event>::all(client.clone())
            .list(&ListParams::default().fields("reason=InsufficientCapacityError"))
            .await
            .map_err(|e| e.to_string())?;
        let hit = events.items.iter().find(|e| {
            e.message.as_deref().is_some_and(|m| {
                m.contains("no free WireGuard address in wireguardPeerCIDR 100.96.0.0/26")
            })
        });
        match hit {
            Some(e) => {
                eprintln!("event: {}", e.message.as_deref().unwrap_or_default());
                Ok(())
            }
            None => Err(format!(
                "{} events, none about the range",
                events.items.len()
            )),
        }
    })
    .await;
    e2e::wait_for("the range full", Duration::from_secs(120), || async {
        let n = nodes_of(&client, pool).await.len();
        if n == 61 {
            Ok(())
        } else {
            Err(format!("{n} nodes"))
        }
    })
    .await;
    let ips: Vec<String> = nodes_of(&client, pool)
        .await
        .iter()
        .filter_map(internal_ip)
        .collect();
    let distinct: HashSet<&String> = ips.iter().collect();
    assert_eq!(distinct.len(), 61, "still no collision once full: {ips:?}");

    e2e::scale(&client, ns, "spread", 0).await;
    scale_to_zero(&client, &emulator, &[pool]).await;
    e2e::clean_up(&client, ns, pool).await;
    e2e::kubectl(
        &c,
        &[
            "delete",
            "nebiusnodeclass",
            "nebius-wg",
            "--ignore-not-found",
        ],
    );
    drop(controller);
}
