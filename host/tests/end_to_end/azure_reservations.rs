//! End-to-end: an AKSNodeClass naming a capacity reservation group. With a
//! reservation of two D8s_v5 in zone 1 and four 4-CPU pods, one per node,
//! the first two VMs go into the reservation (capacity type `reserved`,
//! created into the group) and the other two are on-demand.
//!
//! Needs what `azure_cluster` needs.

use crate::azure_cluster::{
    CPU_POOL, controller, example, node_class_ready, one_per_node, pool_nodes, prepare, tear_down,
};
use crate::common;

use common::arm::{ArmEmulator, RESOURCE_GROUP, SUBSCRIPTION};
use common::cluster::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const APP: &str = "reserved-app";
const GROUP: &str = "crg-e2e";
const SIZE: &str = "Standard_D8s_v5";
const GROUP_LABEL: &str = "karpenter.azure.com/capacity-reservation-group";

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn azure_launches_into_a_capacity_reservation_before_on_demand() {
    let _serial = SERIAL.lock().await;
    let (c, client, ns) = prepare("reserved").await;
    let arm = ArmEmulator::start(&c, &[]);
    arm.admin(
        "reservations",
        json!({"subscription": SUBSCRIPTION, "resourceGroup": RESOURCE_GROUP, "name": GROUP,
               "reservations": [{"name": "d8-zone1", "vmSize": SIZE, "zone": "1", "capacity": 2}]}),
    )
    .await;
    let group_id = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/capacityReservationGroups/{GROUP}"
    );
    let controller = controller(&c, &arm, arm.plugin());
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml"] {
        kubectl(&c, &["apply", "-f", &example(f)]);
    }
    let class_patch = json!({"spec": {"capacityReservation": {"groupID": group_id}}}).to_string();
    kubectl(
        &c,
        &[
            "patch",
            "aksnodeclass",
            "azure",
            "--type=merge",
            "-p",
            &class_patch,
        ],
    );
    let pool_patch = json!([{"op": "replace", "path": "/spec/template/spec/requirements/2/values",
                              "value": ["on-demand", "reserved"]}])
    .to_string();
    kubectl(
        &c,
        &[
            "patch",
            "nodepool",
            CPU_POOL,
            "--type=json",
            "-p",
            &pool_patch,
        ],
    );
    node_class_ready(&c).await;
    wait_for(
        "the AKSNodeClass shows its reservations",
        Duration::from_secs(60),
        || async {
            let condition = kubectl(
                &c,
                &[
                    "get",
                    "aksnodeclass",
                    "azure",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"CapacityReservationGroupReady\")].message}",
                ],
            );
            if condition.contains("d8-zone1 Standard_D8s_v5 in southcentralus-1: 2 of 2 left") {
                Ok(())
            } else {
                Err(condition)
            }
        },
    )
    .await;

    let started = Instant::now();
    apply(&c, one_per_node(&ns, APP, 4, "4"));
    wait_for("4 pods running", Duration::from_secs(300), || {
        pods_running(&client, &ns, APP, 4)
    })
    .await;
    let state = arm.state().await;
    let in_group: Vec<&Value> = state["vmDetails"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| {
            v["capacityReservationGroup"]
                .as_str()
                .is_some_and(|g| g.eq_ignore_ascii_case(&group_id))
        })
        .collect();
    eprintln!(
        "4 pods running {:.1}s after apply; VMs: {}",
        started.elapsed().as_secs_f64(),
        state["vmDetails"]
    );
    assert_eq!(in_group.len(), 2, "two VMs in the reservation: {state}");
    assert!(
        in_group
            .iter()
            .all(|v| v["size"] == SIZE && v["zone"] == "1"),
        "{in_group:?}"
    );
    let nodes = pool_nodes(&client, CPU_POOL).await;
    let label = |n: &k8s_openapi::api::core::v1::Node, k: &str| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(k))
            .cloned()
            .unwrap_or_default()
    };
    let reserved: Vec<_> = nodes
        .iter()
        .filter(|n| label(n, "karpenter.sh/capacity-type") == "reserved")
        .collect();
    assert_eq!(reserved.len(), 2, "two reserved nodes of {}", nodes.len());
    assert!(reserved.iter().all(|n| label(n, GROUP_LABEL) == GROUP));
    let on_demand = nodes
        .iter()
        .filter(|n| label(n, "karpenter.sh/capacity-type") == "on-demand")
        .count();
    assert_eq!(on_demand, 2, "the rest on demand");

    tear_down(&c, &client, &arm, &ns, APP).await;
    drop(controller);
}
