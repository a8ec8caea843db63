//! Registration: the Node whose providerID matches joins the NodeClaim. The
//! Node gets the NodeClaim's labels and taints, the termination finalizer and
//! an owner reference, and loses the unregistered taint that kept pods off
//! it. A NodeClaim whose Node does not come within the registration TTL is
//! deleted (and its instance with it).

use super::{Step, delete_node_claim as delete};
use crate::crds::nodeclaim::conditions::REGISTERED;
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::slim::Node;
use crate::{Ctx, conditions};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use std::time::Duration;
use vocabulary::labels::{REGISTERED as REGISTERED_LABEL, TERMINATION_FINALIZER};
use vocabulary::taints::UNREGISTERED as UNREGISTERED_TAINT;

pub(crate) async fn register(
    ctx: &Ctx,
    nc: &NodeClaim,
    status: &mut NodeClaimStatus,
) -> anyhow::Result<Step> {
    if conditions::is_true(&status.conditions, REGISTERED) {
        return Ok(Step::Continue);
    }
    let Some(id) = status.provider_id.clone() else {
        return Ok(Step::Continue);
    };
    let Some(node) = ctx.cluster.node_by_provider_id(&id) else {
        let age = nc
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| {
                (jiff::Timestamp::now() - t.0)
                    .total(jiff::Unit::Second)
                    .unwrap_or(0.0)
            })
            .unwrap_or(0.0);
        let ttl = ctx.options.registration_ttl;
        let Some(left) = time_left(age, ttl) else {
            ctx.events
                .warning(
                    nc,
                    "RegistrationTimeout",
                    format!(
                        "Node not registered with cluster within {}s; deleting the NodeClaim",
                        ttl.as_secs()
                    ),
                )
                .await;
            tracing::warn!(nodeclaim = %nc.name_any(), provider_id = %id, "registration timed out; deleting");
            delete(ctx, nc).await?;
            return Ok(Step::Deleted);
        };
        conditions::set(
            &mut status.conditions,
            REGISTERED,
            "Unknown",
            "NodeNotFound",
            "Node not registered with cluster",
            nc.metadata.generation,
        );
        return Ok(Step::Wait(left));
    };
    sync_node(ctx, nc, &node).await?;
    status.node_name = node.metadata.name.clone();
    conditions::set(
        &mut status.conditions,
        REGISTERED,
        "True",
        "Registered",
        "",
        nc.metadata.generation,
    );
    let pool = crate::metrics::Metrics::pool(nc.node_pool().unwrap_or_default());
    ctx.metrics.registered.get_or_create(&pool).inc();
    ctx.metrics.nodes_created.get_or_create(&pool).inc();
    ctx.events
        .normal(
            nc,
            "Registered",
            format!(
                "Status condition transitioned, Type: Registered, Status: Unknown -> True, Reason: Registered (node {})",
                node.name_any()
            ),
        )
        .await;
    tracing::info!(nodeclaim = %nc.name_any(), node = %node.name_any(), "registered");
    Ok(Step::Continue)
}

/// How long until a NodeClaim `age_seconds` old whose Node has not come is
/// looked at again (at least a second, at most a minute), or `None` once
/// the registration TTL is spent.
fn time_left(age_seconds: f64, ttl: Duration) -> Option<Duration> {
    let left = ttl.as_secs_f64() - age_seconds;
    (left > 0.0).then(|| Duration::from_secs_f64(left.clamp(1.0, 60.0)))
}

/// Labels, the finalizer, the owner reference and taints in one patch. The
/// taint list has to be replaced whole, so the patch carries the
/// resourceVersion it was computed from and is recomputed on a conflict
/// (kubelets update Nodes all the time).
async fn sync_node(ctx: &Ctx, nc: &NodeClaim, node: &Node) -> anyhow::Result<()> {
    let api = Api::<Node>::all(ctx.client.clone());
    let mut node = node.clone();
    for _ in 0..5 {
        match api
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch(nc, &node)),
            )
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 409 => node = api.get(&node.name_any()).await?,
            r => return Ok(r.map(|_| ())?),
        }
    }
    anyhow::bail!("node {} kept changing; will retry", node.name_any())
}

fn patch(nc: &NodeClaim, node: &Node) -> serde_json::Value {
    let mut labels = nc.labels().clone();
    labels.insert(REGISTERED_LABEL.into(), "true".into());
    let mut finalizers = node.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        finalizers.push(TERMINATION_FINALIZER.into());
    }
    let mut taints: Vec<Taint> = node
        .taints()
        .iter()
        .filter(|t| t.key != UNREGISTERED_TAINT)
        .cloned()
        .collect();
    for t in nc.spec.taints.iter().chain(&nc.spec.startup_taints) {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            taints.push(t.clone());
        }
    }
    let mut owners = node.owner_references().to_vec();
    let uid = nc.metadata.uid.clone().unwrap_or_default();
    if !owners.iter().any(|o| o.uid == uid) {
        owners.push(OwnerReference {
            api_version: NodeClaim::api_version(&()).into(),
            kind: NodeClaim::kind(&()).into(),
            name: nc.name_any(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    serde_json::json!({
        "metadata": {
            "labels": labels,
            "finalizers": finalizers,
            "ownerReferences": owners,
            "resourceVersion": node.resource_version(),
        },
        "spec": {"taints": taints},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    #[test]
    fn a_node_that_does_not_come_in_time_ends_its_claim() {
        let ttl = Duration::from_secs(900);
        assert_eq!(time_left(0.0, ttl), Some(Duration::from_secs(60)));
        assert_eq!(time_left(880.0, ttl), Some(Duration::from_secs(20)));
        assert_eq!(time_left(899.5, ttl), Some(Duration::from_secs(1)));
        assert_eq!(time_left(900.0, ttl), None);
        assert_eq!(time_left(5_000.0, ttl), None);
    }

    #[test]
    fn the_node_takes_the_claims_labels_taints_finalizer_and_owner() {
        let nc: NodeClaim = fixtures::claim("a")
            .label("team", "web")
            .taint("dedicated", "NoSchedule")
            .startup_taint("example.com/agent", "NoExecute")
            .build();
        let node: Node = fixtures::node("a")
            .label("team", "kubelet-said")
            .taint(UNREGISTERED_TAINT, "NoExecute")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .taint("dedicated", "NoSchedule")
            .finalizers(&["example.com/csi"])
            .build();
        let p = patch(&nc, &node);
        let meta = &p["metadata"];
        assert_eq!(meta["labels"]["team"], "web", "the NodeClaim's labels win");
        assert_eq!(meta["labels"]["karpenter.sh/registered"], "true");
        assert_eq!(meta["labels"]["karpenter.sh/nodepool"], "default");
        assert_eq!(
            meta["finalizers"],
            json!(["example.com/csi", TERMINATION_FINALIZER]),
            "others' finalizers are kept"
        );
        assert_eq!(meta["resourceVersion"], "3", "computed from this copy");
        let owner = &meta["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["name"].as_str()),
            (Some("NodeClaim"), Some("a"))
        );
        assert_eq!(owner["uid"], json!(nc.metadata.uid));
        assert_eq!(owner["blockOwnerDeletion"], true);
        let taints: Vec<(&str, &str)> = p["spec"]["taints"]
            .as_array()
            .expect("taints")
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap_or(""),
                    t["effect"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            taints,
            [
                ("node.kubernetes.io/not-ready", "NoSchedule"),
                ("dedicated", "NoSchedule"),
                ("example.com/agent", "NoExecute"),
            ],
            "the unregistered taint goes, the kubelet's stay, the claim's are added once"
        );
    }

    #[test]
    fn a_node_already_synced_gets_the_same_patch_again() {
        let nc: NodeClaim = fixtures::claim("a")
            .taint("dedicated", "NoSchedule")
            .build();
        let first: Node = fixtures::node("a").build();
        let p = patch(&nc, &first);
        let synced: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "a",
                "resourceVersion": "4",
                "labels": p["metadata"]["labels"],
                "finalizers": p["metadata"]["finalizers"],
                "ownerReferences": p["metadata"]["ownerReferences"],
            },
            "spec": {"providerID": "test://a", "taints": p["spec"]["taints"]},
        }))
        .expect("node");
        let again = patch(&nc, &synced);
        assert_eq!(again["metadata"]["finalizers"], p["metadata"]["finalizers"]);
        assert_eq!(
            again["metadata"]["ownerReferences"],
            p["metadata"]["ownerReferences"]
        );
        assert_eq!(again["spec"], p["spec"]);
    }
}
