//! Disruption taints nobody is acting on. A Node tainted
//! `karpenter.sh/disrupted` whose NodeClaim is not being deleted and that no
//! command under way holds belongs to no command: a leader crashed or was
//! deposed mid-command. Karpenter removes
//! such taints at the start of each pass; so does this, or the node would
//! take no pods until something deleted it.

use super::execute::{ClaimIndex, untaint};
use crate::Ctx;
use crate::slim::Node;
use kube::ResourceExt;
use kube::api::Api;
use std::sync::Arc;

/// The Nodes whose disruption taint is stale.
pub fn stale<'a>(
    nodes: &'a [Arc<Node>],
    index: &ClaimIndex<'_>,
    held: impl Fn(&str) -> bool,
) -> Vec<&'a Node> {
    nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| !n.metadata.name.as_deref().is_some_and(&held))
        .filter(|n| {
            n.taints()
                .iter()
                .any(|t| t.key == vocabulary::taints::DISRUPTED)
        })
        .filter(|n| {
            // A Node without a NodeClaim is not ours to untaint.
            let claim = n.metadata.name.as_deref().and_then(|name| index.of(name));
            claim.is_some_and(|c| c.metadata.deletion_timestamp.is_none())
        })
        .map(|n| &**n)
        .collect()
}

pub async fn remove(ctx: &Ctx) {
    let (nodes, claims) = (ctx.cluster.nodes.state(), ctx.cluster.node_claims.state());
    let index = ClaimIndex::new(&nodes, &claims);
    let stale = stale(&nodes, &index, |name| ctx.disrupting.contains(name));
    if stale.is_empty() {
        return;
    }
    let api = Api::<Node>::all(ctx.client.clone());
    for node in stale {
        let name = node.name_any();
        match untaint(&api, node).await {
            Ok(()) => {
                tracing::info!(node = %name, "removed a stale disruption taint");
                if let Some(claim) = index.of(&name) {
                    ctx.events
                        .normal(
                            &**claim,
                            "DisruptionTaintRemoved",
                            "Removed the karpenter.sh/disrupted taint: no disruption is in progress for this node".to_string(),
                        )
                        .await;
                }
            }
            Err(e) => tracing::warn!(
                node = %name,
                error = format!("{e:#}"),
                "removing a stale disruption taint"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crds::NodeClaim;
    use serde_json::json;

    fn node(name: &str, tainted: bool, deleting: bool) -> Arc<Node> {
        let taints = if tainted {
            json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        let mut n = json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("kwok://{name}"), "taints": taints},
        });
        if deleting {
            n["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(n).expect("node"))
    }

    fn claim(name: &str, deleting: bool) -> Arc<NodeClaim> {
        let mut c = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": format!("claim-{name}"), "finalizers": ["karpenter.sh/termination"]},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}, "requirements": []},
            "status": {"providerID": format!("kwok://{name}")},
        });
        if deleting {
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(c).expect("claim"))
    }

    #[test]
    fn only_taints_of_nodes_no_one_is_removing_are_stale() {
        let nodes = vec![
            node("left-by-a-crashed-leader", true, false),
            node("terminating", true, false),
            node("node-being-deleted", true, true),
            node("untainted", false, false),
            node("not-ours", true, false),
            node("held-by-a-command", true, false),
        ];
        let claims = vec![
            claim("left-by-a-crashed-leader", false),
            claim("terminating", true),
            claim("node-being-deleted", false),
            claim("untainted", false),
            claim("held-by-a-command", false),
        ];
        let index = ClaimIndex::new(&nodes, &claims);
        assert_eq!(
            stale(&nodes, &index, |n| n == "held-by-a-command")
                .iter()
                .map(|n| n.name_any())
                .collect::<Vec<_>>(),
            ["left-by-a-crashed-leader"]
        );
    }
}
