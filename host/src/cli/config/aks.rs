//! What an AKS cluster's API server tells about its Azure side: the node
//! resource group and subnet from the system nodes' providerIDs and labels,
//! the tenant from the workload identity webhook's configuration, the
//! karpenter identity from an earlier install's ServiceAccount.

use k8s_openapi::api::core::v1::{ConfigMap, Node, ServiceAccount};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// Found on the cluster; `None` for what it does not tell.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub node_resource_group: Option<String>,
    pub subnet_id: Option<String>,
    pub tenant_id: Option<String>,
    pub client_id: Option<String>,
}

const CLIENT_ID_ANNOTATION: &str = "azure.workload.identity/client-id";

pub async fn discover(client: &Client, subscription: Option<&str>) -> anyhow::Result<Discovered> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut found = from_nodes(&nodes, subscription);
    // Read-only lookups: an object that is absent or forbidden leaves a blank.
    found.tenant_id = Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .get_opt("azure-wi-webhook-config")
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data?.get("AZURE_TENANT_ID").cloned())
        .filter(|t| !t.is_empty());
    found.client_id = Api::<ServiceAccount>::namespaced(client.clone(), "karpenter")
        .get_opt("karpenter")
        .await
        .ok()
        .flatten()
        .and_then(|sa| sa.annotations().get(CLIENT_ID_ANNOTATION).cloned())
        .filter(|c| !c.is_empty() && !c.starts_with('<'));
    Ok(found)
}

/// The node resource group and subnet from the first Azure node Karpenter
/// did not make (those are the cluster's own node pools).
pub fn from_nodes(nodes: &[Node], subscription: Option<&str>) -> Discovered {
    let mut found = Discovered::default();
    let own = nodes
        .iter()
        .filter(|n| !n.labels().contains_key("karpenter.sh/nodepool"));
    for node in own {
        let labels = node.labels();
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or_default();
        let Some(arm_id) = provider_id.strip_prefix("azure://") else {
            continue;
        };
        if found.node_resource_group.is_none() {
            found.node_resource_group = labels
                .get("kubernetes.azure.com/cluster")
                .cloned()
                .or_else(|| segment(arm_id, "resourceGroups"));
        }
        if found.subnet_id.is_none() {
            let label = |k: &str| {
                labels
                    .get(&format!("kubernetes.azure.com/network-{k}"))
                    .filter(|v| !v.is_empty())
            };
            let sub = label("subscription")
                .map(String::as_str)
                .or(subscription)
                .map(str::to_string)
                .or_else(|| segment(arm_id, "subscriptions"));
            if let (Some(sub), Some(rg), Some(vnet), Some(subnet)) =
                (sub, label("resourcegroup"), label("name"), label("subnet"))
            {
                found.subnet_id = Some(format!(
                    "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/virtualNetworks/{vnet}/subnets/{subnet}"
                ));
            }
        }
    }
    found
}

/// The value after `key` in an ARM id (case-insensitive key).
fn segment(arm_id: &str, key: &str) -> Option<String> {
    let mut parts = arm_id.split('/').filter(|p| !p.is_empty());
    while let Some(p) = parts.next() {
        if p.eq_ignore_ascii_case(key) {
            return parts.next().map(str::to_string);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value, provider_id: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": labels},
            "spec": {"providerID": provider_id}
        }))
        .expect("node")
    }

    #[test]
    fn reads_the_system_pool() {
        let vmss = "azure:///subscriptions/sub-1/resourceGroups/MC_rg_aks_southcentralus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-system-1/virtualMachines/0";
        let nodes = [
            // Karpenter's own nodes are not the cluster's node pools.
            node(
                json!({"karpenter.sh/nodepool": "p", "kubernetes.azure.com/cluster": "wrong"}),
                vmss,
            ),
            node(json!({}), "kwok://n1"),
            node(
                json!({
                    "kubernetes.azure.com/network-resourcegroup": "rg-net",
                    "kubernetes.azure.com/network-name": "vnet",
                    "kubernetes.azure.com/network-subnet": "aks",
                }),
                vmss,
            ),
        ];
        let found = from_nodes(&nodes, Some("sub-env"));
        assert_eq!(
            found.node_resource_group.as_deref(),
            Some("MC_rg_aks_southcentralus")
        );
        assert_eq!(
            found.subnet_id.as_deref(),
            Some(
                "/subscriptions/sub-env/resourceGroups/rg-net/providers/Microsoft.Network/virtualNetworks/vnet/subnets/aks"
            )
        );
        assert_eq!(from_nodes(&nodes[..2], None), Discovered::default());
    }
}
