//! The plugin's settings (the controller environment of the upstream chart),
//! read from the host's config capability.
//!
//! | setting | default | what |
//! | --- | --- | --- |
//! | LOCATION | southcentralus | the region |
//! | AZURE_SUBSCRIPTION_ID | (required to launch) | |
//! | AZURE_NODE_RESOURCE_GROUP | (required to launch) | where VMs and NICs go |
//! | ARM_RESOURCE_GROUP | | the cluster's resource group (informational) |
//! | VNET_SUBNET_ID | | subnet of the NICs unless the AKSNodeClass names one |
//! | SSH_PUBLIC_KEY | ssh-key-not-set | azureuser's key |
//! | KUBELET_BOOTSTRAP_TOKEN | (required to launch) | `<id>.<secret>` |
//! | ARM_CLOUD | AzurePublicCloud | picks the ARM endpoint |
//! | ARM_ENDPOINT | from ARM_CLOUD | override, e.g. an emulator `http://127.0.0.1:PORT` |
//! | ARM_AUTH | workload-identity | `none`: send no bearer token (emulators) |
//! | KUBERNETES_VERSION | 1.34.2 | status.kubernetesVersion |
//! | IMAGE_VERSION | 202509.09.0 | node image version |
//! | NETWORK_PLUGIN / NETWORK_PLUGIN_MODE | azure / overlay | default maxPods: 250 overlay, 30 azure, else 110 |
//! | VM_MEMORY_OVERHEAD_PERCENT | 0.075 | memory capacity margin |
//! | CATALOG_REFRESH | true | refresh SKUs and prices from the APIs |
//! | QUOTA_CHECK | true | hold back offerings the subscription's vCPU quota cannot take (usages API) |
//! | PRICES_ENDPOINT | https://prices.azure.com | Retail Prices API |
//! | CLUSTER_NAME | the host's cluster name | the cluster tag |
//! | NODE_IDENTITIES | | comma-separated user-assigned identity ids for nodes |

use crate::nodeclass::{DEFAULT_IMAGE_VERSION, DEFAULT_KUBERNETES_VERSION};
use karpenter_plugin_sdk::prelude::*;

#[derive(Debug, Clone)]
pub struct Settings {
    pub location: String,
    pub subscription: Option<String>,
    pub node_resource_group: Option<String>,
    pub subnet_id: Option<String>,
    pub ssh_public_key: String,
    pub bootstrap_token: Option<String>,
    pub arm_endpoint: String,
    pub arm_scope: String,
    pub auth: bool,
    pub kubernetes_version: String,
    pub image_version: String,
    pub network_plugin: String,
    pub network_plugin_mode: String,
    pub vm_memory_overhead: f64,
    pub catalog_refresh: bool,
    pub quota_check: bool,
    pub prices_endpoint: String,
    pub cluster_name: String,
    pub node_identities: Vec<String>,
}

fn get(key: &str) -> Option<String> {
    config::get_setting(key)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl Settings {
    pub fn load() -> Settings {
        let cloud = get("ARM_CLOUD").unwrap_or_else(|| "AzurePublicCloud".into());
        let cloud_endpoint = match cloud.to_ascii_lowercase().as_str() {
            "azureusgovernmentcloud" | "azureusgovernment" => {
                "https://management.usgovcloudapi.net"
            }
            "azurechinacloud" => "https://management.chinacloudapi.cn",
            _ => "https://management.azure.com",
        };
        let arm_endpoint = get("ARM_ENDPOINT").unwrap_or_else(|| cloud_endpoint.to_string());
        Settings {
            location: get("LOCATION")
                .unwrap_or_else(|| "southcentralus".into())
                .to_ascii_lowercase(),
            subscription: get("AZURE_SUBSCRIPTION_ID"),
            node_resource_group: get("AZURE_NODE_RESOURCE_GROUP"),
            subnet_id: get("VNET_SUBNET_ID"),
            ssh_public_key: get("SSH_PUBLIC_KEY").unwrap_or_else(|| "ssh-key-not-set".into()),
            bootstrap_token: get("KUBELET_BOOTSTRAP_TOKEN"),
            arm_scope: format!("{cloud_endpoint}/.default"),
            arm_endpoint: arm_endpoint.trim_end_matches('/').to_string(),
            auth: !get("ARM_AUTH").is_some_and(|a| a.eq_ignore_ascii_case("none")),
            kubernetes_version: get("KUBERNETES_VERSION")
                .unwrap_or_else(|| DEFAULT_KUBERNETES_VERSION.into()),
            image_version: get("IMAGE_VERSION").unwrap_or_else(|| DEFAULT_IMAGE_VERSION.into()),
            network_plugin: get("NETWORK_PLUGIN").unwrap_or_else(|| "azure".into()),
            network_plugin_mode: get("NETWORK_PLUGIN_MODE").unwrap_or_else(|| "overlay".into()),
            vm_memory_overhead: get("VM_MEMORY_OVERHEAD_PERCENT")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && (0.0..1.0).contains(v))
                .unwrap_or(0.075),
            catalog_refresh: !get("CATALOG_REFRESH")
                .is_some_and(|v| v.eq_ignore_ascii_case("false")),
            quota_check: !get("QUOTA_CHECK").is_some_and(|v| v.eq_ignore_ascii_case("false")),
            prices_endpoint: get("PRICES_ENDPOINT")
                .unwrap_or_else(|| "https://prices.azure.com".into())
                .trim_end_matches('/')
                .to_string(),
            cluster_name: get("CLUSTER_NAME").unwrap_or_else(|| cluster::info().name),
            node_identities: get("NODE_IDENTITIES")
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// maxPods when the AKSNodeClass does not set it: 250 with overlay CNI,
    /// 30 with Azure CNI without overlay, else 110.
    pub fn default_max_pods(&self) -> u64 {
        default_max_pods(&self.network_plugin, &self.network_plugin_mode)
    }

    pub fn require(&self, what: &str, value: &Option<String>) -> Result<String, Error> {
        value.clone().ok_or_else(|| {
            create_error(
                "MissingSetting",
                format!("setting {what} is not configured"),
                false,
            )
        })
    }
}

pub fn default_max_pods(plugin: &str, mode: &str) -> u64 {
    if mode.eq_ignore_ascii_case("overlay") {
        250
    } else if plugin.eq_ignore_ascii_case("azure") {
        30
    } else {
        110
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn max_pods_by_network() {
        assert_eq!(super::default_max_pods("azure", "overlay"), 250);
        assert_eq!(super::default_max_pods("azure", ""), 30);
        assert_eq!(super::default_max_pods("none", ""), 110);
    }
}
