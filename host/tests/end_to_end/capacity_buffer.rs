//! End-to-end: a CapacityBuffer with the CapacityBuffer feature gate. Its
//! room is launched while the workload is at zero, with no pod asking for
//! it; the workload's pods start there without a new NodeClaim; the room is
//! launched again once they took it, kept by consolidation (which deletes
//! the same node once the buffer is gone), and status says how many pods
//! the buffer holds and where.

use crate::common;

use common::cluster::*;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use std::time::Duration;

/// One chunk: 600m, on this scenario's NodePool. Three fill a c-2x node.
fn chunk(pool: &str) -> serde_json::Value {
    json!({
        "nodeSelector": {"e2e": pool},
        "tolerations": [{"operator": "Exists", "key": "kwok.x-k8s.io/node"}],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "600m"}}}]
    })
}

fn buffer(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    })
}

fn jsonpath(c: &Cluster, ns: &str, name: &str, path: &str) -> String {
    kubectl(
        c,
        &[
            "get",
            "capacitybuffer",
            "-n",
            ns,
            name,
            "-o",
            &format!("jsonpath={path}"),
        ],
    )
}

fn condition(c: &Cluster, ns: &str, name: &str, type_: &str) -> String {
    jsonpath(
        c,
        ns,
        name,
        &format!(
            "{{.status.conditions[?(@.type==\"{type_}\")].status}}/{{.status.conditions[?(@.type==\"{type_}\")].reason}}"
        ),
    )
}

async fn node_count(client: &kube::Client, pool: &str, want: usize) -> Result<(), String> {
    let claims = claims_of(client, pool)
        .await
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count();
    let nodes = kwok_nodes(client, pool).await.len();
    if claims == want && nodes == want {
        Ok(())
    } else {
        Err(format!("{claims} NodeClaims, {nodes} Nodes"))
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_buffer_keeps_room_for_pods_that_do_not_exist_yet() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let run = std::process::id();
    let (ns, pool) = (format!("e2e-buffer-{run}"), format!("buffer-{run}"));
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    let mut np = node_pool(
        pool,
        json!([
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}
        ]),
    );
    // Empty nodes go at once: only the buffer keeps one.
    np["spec"]["disruption"]["consolidateAfter"] = "0s".into();
    apply(&c, np);
    apply(
        &c,
        json!({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": "chunk", "namespace": ns},
            "template": {"metadata": {"labels": {"app": "chunk"}}, "spec": chunk(pool)}
        }),
    );
    apply(
        &c,
        buffer(
            ns,
            "spare",
            json!({"podTemplateRef": {"name": "chunk"}, "replicas": 3}),
        ),
    );
    apply(&c, deployment(ns, "web", pool, 0, "600m", false));
    let controller = Controller::start(
        &c,
        &[],
        &[
            "--disable-leader-election",
            "--feature-gates",
            "CapacityBuffer=true",
        ],
    );

    // Room for three chunks: one node, no pod.
    wait_for("one node for the buffer", Duration::from_secs(120), || {
        node_count(&client, pool, 1)
    })
    .await;
    wait_for("the buffer fits", Duration::from_secs(60), || async {
        let ready = condition(&c, ns, "spare", "ReadyForProvisioning");
        let fits = condition(&c, ns, "spare", "Provisioning");
        let replicas = jsonpath(&c, ns, "spare", "{.status.replicas}");
        if ready == "True/Resolved" && fits == "True/FitsExistingCapacity" && replicas == "3" {
            Ok(())
        } else {
            Err(format!("{ready} {fits} replicas={replicas}"))
        }
    })
    .await;
    let pods = kubectl(&c, &["get", "pods", "-n", ns, "-o", "name"]);
    assert!(pods.trim().is_empty(), "a buffer creates no pod: {pods}");

    let first = kwok_nodes(&client, pool).await[0].name_any();

    // Real pods take the room, on the node that was there; the buffer's
    // room is launched again.
    scale(&client, ns, "web", 3).await;
    wait_for("three pods run", Duration::from_secs(120), || {
        pods_running(&client, ns, "web", 3)
    })
    .await;
    let on: Vec<String> = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(
        on,
        vec![first.clone(); 3],
        "the pods started in the buffer's room"
    );
    wait_for(
        "a second node for the buffer",
        Duration::from_secs(120),
        || node_count(&client, pool, 2),
    )
    .await;
    wait_for("the buffer fits again", Duration::from_secs(60), || async {
        match condition(&c, ns, "spare", "Provisioning").as_str() {
            "True/FitsExistingCapacity" => Ok(()),
            other => Err(other.to_string()),
        }
    })
    .await;

    // Consolidation (consolidateAfter 0s) keeps the node the buffer holds
    // through several disruption passes: the same two NodeClaims, none
    // deleted and made again...
    let names = || async {
        let mut n: Vec<String> = claims_of(&client, pool)
            .await
            .iter()
            .map(|c| c.name_any())
            .collect();
        n.sort();
        n
    };
    let before = names().await;
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_eq!(
        names().await,
        before,
        "consolidation kept the buffer's node"
    );
    node_count(&client, pool, 2)
        .await
        .expect("consolidation kept the buffer's node");
    // `karpenter explain` names the buffer's room as what keeps it.
    let second = kwok_nodes(&client, pool)
        .await
        .iter()
        .map(|n| n.name_any())
        .find(|n| *n != first)
        .expect("the second node");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args([
            "explain",
            "node",
            &second,
            "--feature-gates",
            "CapacityBuffer=true",
            "--plugin-dir",
        ])
        .arg(controller.dir.path().join("plugins"))
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter explain node");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("of CapacityBuffer {ns}/spare")),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ...and deletes it once the buffer is gone.
    kubectl(&c, &["delete", "capacitybuffer", "-n", ns, "spare"]);
    wait_for("the empty node goes", Duration::from_secs(120), || {
        node_count(&client, pool, 1)
    })
    .await;

    // A percentage of a workload: 50% of three pods is two.
    apply(
        &c,
        buffer(
            ns,
            "half",
            json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 50}),
        ),
    );
    wait_for("half of web", Duration::from_secs(60), || async {
        let replicas = jsonpath(&c, ns, "half", "{.status.replicas}");
        let ready = condition(&c, ns, "half", "ReadyForProvisioning");
        if replicas == "2" && ready == "True/Resolved" {
            Ok(())
        } else {
            Err(format!("{ready} replicas={replicas}"))
        }
    })
    .await;
    // A buffer naming a PodTemplate that does not exist says so.
    apply(
        &c,
        buffer(
            ns,
            "missing",
            json!({"podTemplateRef": {"name": "nope"}, "replicas": 1}),
        ),
    );
    wait_for(
        "missing template reported",
        Duration::from_secs(60),
        || async {
            match condition(&c, ns, "missing", "ReadyForProvisioning").as_str() {
                "False/PodTemplateNotFound" => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    clean_up(&client, ns, pool).await;
}
