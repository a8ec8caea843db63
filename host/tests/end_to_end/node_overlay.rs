//! End-to-end: NodeOverlays with the NodeOverlay feature gate. An overlay
//! that makes one family cheaper changes the type the inflate Deployment's
//! node is launched as; its status says it applied; an overlay of the same
//! weight that overlaps it is reported as a conflict.

use crate::common;

use common::cluster::*;
use karpenter_controller::crds::NodeOverlay;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use std::time::Duration;

const FAMILY: &str = "karpenter.kwok.sh/instance-family";

fn overlay(name: &str, weight: i32, family: &str, adjustment: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {
            "weight": weight,
            "requirements": [{"key": FAMILY, "operator": "In", "values": [family]}],
            "priceAdjustment": adjustment
        }
    })
}

async fn condition(client: &kube::Client, name: &str) -> Option<(String, String)> {
    let o = Api::<NodeOverlay>::all(client.clone())
        .get(name)
        .await
        .ok()?;
    o.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status, c.reason))
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_cheaper_family_changes_the_type_launched() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let run = std::process::id();
    let (ns, pool) = (format!("e2e-overlay-{run}"), format!("overlay-{run}"));
    let (ns, pool) = (ns.as_str(), pool.as_str());
    // Of equal weights the name later in the alphabet goes first.
    let (cheap, rival) = (format!("overlay-b-{run}"), format!("overlay-a-{run}"));
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "inflate", pool, 0, "1", false));
    apply(&c, overlay(&cheap, 50, "m", "-90%"));
    apply(&c, overlay(&rival, 50, "m", "-10%"));
    let controller = Controller::start(
        &c,
        &[],
        &[
            "--disable-leader-election",
            "--feature-gates",
            "NodeOverlay=true",
        ],
    );
    scale(&client, ns, "inflate", 5).await;
    wait_for("five pods run", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 5)
    })
    .await;
    let nodes = kwok_nodes(&client, pool).await;
    let types: Vec<String> = nodes
        .iter()
        .map(|n| {
            n.labels()
                .get("node.kubernetes.io/instance-type")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    assert!(
        !types.is_empty() && types.iter().all(|t| t.starts_with("m-")),
        "launched from the family the overlay made cheaper: {types:?}\n{}",
        controller.log()
    );
    let claims = claims_of(&client, pool).await;
    assert!(
        claims.iter().all(|c| c
            .annotations()
            .get("karpenter.sh/price-overlay-applied")
            .is_some_and(|v| v == "true")),
        "{claims:#?}"
    );
    // The rival overlaps it at the same weight: it conflicts and changes nothing.
    wait_for("the overlays' status", Duration::from_secs(60), || async {
        match (
            condition(&client, &cheap).await,
            condition(&client, &rival).await,
        ) {
            (Some(c), Some(r)) if c.0 == "True" && r == ("False".into(), "Conflict".into()) => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for name in [&cheap, &rival] {
        let _ = Api::<NodeOverlay>::all(client.clone())
            .delete(name, &Default::default())
            .await;
    }
    clean_up(&client, ns, pool).await;
}
