//! End-to-end: a static NodePool with the StaticCapacity feature gate.
//! `kubectl scale nodepool --replicas 3` gives three Ready nodes with no pod
//! asking for them; scaling to 1 removes two; a template change replaces the
//! drifted node, its replacement first.

use crate::common;

use common::cluster::*;
use kube::ResourceExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

async fn ready_nodes(client: &kube::Client, pool: &str, want: usize) -> Result<(), String> {
    let nodes = kwok_nodes(client, pool).await;
    let up = nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none() && node_ready(n))
        .count();
    if up == want && nodes.len() == want {
        Ok(())
    } else {
        Err(format!("{} nodes, {up} Ready", nodes.len()))
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn scaling_a_static_nodepool_adds_and_removes_nodes() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let run = std::process::id();
    let (ns, pool) = (format!("e2e-static-{run}"), format!("static-{run}"));
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    let mut np = node_pool(pool, requirements_on_demand_amd64());
    np["spec"]["replicas"] = 0.into();
    np["spec"]["limits"] = serde_json::json!({"nodes": "5"});
    apply(&c, np);
    let _controller = Controller::start(
        &c,
        &[],
        &[
            "--disable-leader-election",
            "--feature-gates",
            "StaticCapacity=true",
        ],
    );
    kubectl(&c, &["scale", "nodepool", pool, "--replicas", "3"]);
    wait_for("three Ready nodes", Duration::from_secs(120), || {
        ready_nodes(&client, pool, 3)
    })
    .await;
    assert_eq!(claims_of(&client, pool).await.len(), 3);

    kubectl(&c, &["scale", "nodepool", pool, "--replicas", "1"]);
    wait_for("one node left", Duration::from_secs(120), || {
        ready_nodes(&client, pool, 1)
    })
    .await;
    wait_for("one NodeClaim left", Duration::from_secs(60), || async {
        match claims_of(&client, pool).await.len() {
            1 => Ok(()),
            n => Err(format!("{n} NodeClaims")),
        }
    })
    .await;
    // The scale subresource reads the NodePool's node count.
    wait_for("status.nodes is 1", Duration::from_secs(30), || async {
        let out = kubectl(
            &c,
            &["get", "nodepool", pool, "-o", "jsonpath={.status.nodes}"],
        );
        if out.trim() == "1" { Ok(()) } else { Err(out) }
    })
    .await;

    // Drift: a new template label replaces the node, its replacement made
    // first, so the NodePool never has fewer than its one node.
    let before: Vec<String> = claims_of(&client, pool)
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    kubectl(
        &c,
        &[
            "patch",
            "nodepool",
            pool,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"template":{"metadata":{"labels":{"generation":"2"}}}}}"#,
        ],
    );
    let most = std::sync::Arc::new(AtomicUsize::new(0));
    wait_for_every(
        "the drifted node replaced",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || {
            let client = client.clone();
            let before = before.clone();
            let most = most.clone();
            async move {
                let claims = claims_of(&client, pool).await;
                most.fetch_max(claims.len(), Ordering::Relaxed);
                let names: Vec<String> = claims.iter().map(|c| c.name_any()).collect();
                let fresh = names.len() == 1 && !before.contains(&names[0]);
                if fresh && ready_nodes(&client, pool, 1).await.is_ok() {
                    Ok(())
                } else {
                    Err(format!("NodeClaims {names:?}"))
                }
            }
        },
    )
    .await;
    assert_eq!(
        most.load(Ordering::Relaxed),
        2,
        "the replacement came before the node went, one at a time"
    );
    clean_up(&client, ns, pool).await;
}
