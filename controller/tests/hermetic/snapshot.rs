//! The cluster as the scheduler sees it: a starting node borrows from its
//! NodeClaim what its kubelet has not reported yet, as Karpenter's cluster
//! state does, so the pods it was launched for still count on it.

use k8s_openapi::api::core::v1::Pod;
use karpenter_controller::crds::NodeClaim;
use karpenter_controller::slim::Node;
use karpenter_controller::snapshot::cluster::{Objects, build};
use serde_json::json;
use std::sync::Arc;

fn claim(name: &str) -> Arc<NodeClaim> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "web"}},
            "spec": {
                "nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m-2"]}],
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}]
            },
            "status": {
                "providerID": format!("test://{name}"),
                "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
                "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}
            }
        }))
        .expect("a NodeClaim"),
    )
}

/// A Node as a kubelet registers it: none of the NodePool's labels or
/// taints yet, a startup taint, and no resources reported.
fn starting_node(name: &str, labels: serde_json::Value) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "providerID": format!("test://{name}"),
                "taints": [
                    {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                    {"key": "example.com/agent", "effect": "NoSchedule"}
                ]
            },
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .expect("a Node"),
    )
}

fn pending_web_pod() -> Arc<karpenter_controller::slim::Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "default", "uid": "u-0"},
        "spec": {
            "nodeSelector": {"team": "web", "node.kubernetes.io/instance-type": "m-2"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
        },
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("a Pod");
    Arc::new(pod.into())
}

fn plan(nodes: &[Arc<Node>], claims: &[Arc<NodeClaim>]) -> engine::Plan {
    let converted = build(
        &Objects {
            pods: &[pending_web_pod()],
            nodes,
            node_claims: claims,
            daemon_sets: &[],
        },
        &[],
    );
    assert!(converted.skipped.is_empty(), "{:?}", converted.skipped);
    engine::schedule(&engine::Snapshot {
        nodes: converted.nodes,
        pods: converted.pods,
        ..engine::Snapshot::default()
    })
}

#[test]
fn an_unregistered_node_takes_the_pods_its_claim_was_made_for() {
    let plan = plan(&[starting_node("c-1", json!({}))], &[claim("c-1")]);
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    assert_eq!(
        plan.placements[0].target,
        engine::Target::ExistingNode("c-1".into())
    );
}

#[test]
fn a_registered_node_is_judged_by_its_own_labels() {
    // Registered: the Node's labels are the truth, and these lack `team`.
    let node = starting_node(
        "c-1",
        json!({"karpenter.sh/registered": "true", "karpenter.sh/nodepool": "default"}),
    );
    let plan = plan(&[node], &[claim("c-1")]);
    assert_eq!(plan.unschedulable.len(), 1, "{plan:#?}");
}

#[test]
fn an_unmanaged_node_lends_nothing() {
    let plan = plan(&[starting_node("other", json!({}))], &[claim("c-1")]);
    // The pod goes to the NodeClaim still in flight, not the unmanaged node.
    assert_eq!(
        plan.placements[0].target,
        engine::Target::ExistingNode("c-1".into())
    );
}

/// A pending pod of the `web` ReplicaSet, or of another template.
fn web_pod(name: &str, cpu: &str) -> Arc<karpenter_controller::slim::Pod> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": name,
                     "labels": {"app": "web"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r1"}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("a Pod");
    Arc::new(pod.into())
}

#[test]
fn the_pods_of_one_template_share_what_it_decides() {
    let converted = build(
        &Objects {
            pods: &[
                web_pod("web-0", "1"),
                web_pod("web-1", "1"),
                web_pod("big", "2"),
            ],
            nodes: &[],
            node_claims: &[],
            daemon_sets: &[],
        },
        &[],
    );
    let [a, b, big] = converted.pods.as_slice() else {
        panic!("three pods: {:?}", converted.pods);
    };
    assert_eq!((a.name.as_str(), b.name.as_str()), ("web-0", "web-1"));
    assert!(
        Arc::ptr_eq(&a.template, &b.template),
        "one template, one copy"
    );
    assert!(!Arc::ptr_eq(&a.template, &big.template));
    assert_eq!(a.requests.get("cpu"), Some(&1000));
    assert_eq!(big.requests.get("cpu"), Some(&2000));
    assert_eq!(big.labels, a.labels);
}

/// A node a disruption command under way holds is, to the next decision,
/// already going: not a candidate again, and counted against the budgets.
#[test]
fn a_node_a_command_holds_is_deleting_to_the_next_decision() {
    use karpenter_controller::snapshot::disruption::{Inputs, Observed, build};
    let nodes = [
        starting_node("held", json!({})),
        starting_node("free", json!({})),
    ];
    let claims = [claim("held"), claim("free"), claim("launching-held")];
    let mut launching = (*claims[2]).clone();
    if let Some(s) = launching.status.as_mut() {
        s.provider_id = None;
    }
    let claims = [claims[0].clone(), claims[1].clone(), Arc::new(launching)];
    let observed = Observed {
        disrupting: ["held", "launching-held"].map(String::from).into(),
        ..Observed::default()
    };
    let (snapshot, skipped) = build(&Inputs {
        objects: Objects {
            pods: &[],
            nodes: &nodes,
            node_claims: &claims,
            daemon_sets: &[],
        },
        pdbs: &[],
        pools: &[],
        observed: &observed,
        now: 0,
        options: Default::default(),
    });
    assert!(skipped.is_empty(), "{skipped:?}");
    let deleting: Vec<_> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.deleting))
        .collect();
    assert_eq!(
        deleting,
        [("held", true), ("free", false), ("launching-held", true)]
    );
}
