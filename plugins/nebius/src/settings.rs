//! The plugin's settings, read from the host's config capability.
//!
//! | setting | default | what |
//! | --- | --- | --- |
//! | NEBIUS_API_ENDPOINT | https://compute.api.nebius.cloud:443 | compute and operations (`http://host:port` for an h2c emulator) |
//! | NEBIUS_IAM_ENDPOINT | https://tokens.iam.api.nebius.cloud:443 | the token exchange |
//! | NEBIUS_CREDENTIALS_SECRET | nebius-credentials/credentials.json | the granted secret holding the service-account credentials (not granted: instance types come from the built-in table) |
//! | NEBIUS_PROJECT_ID | | the project listed by list-instances before any NodeClass was seen |
//! | NEBIUS_SERVICE_ACCOUNT_ID | | the service account instances run as |
//! | KUBELET_BOOTSTRAP_TOKEN | (required to launch) | `<id>.<secret>` |
//! | KUBERNETES_VERSION | 1.34.2 | written to the node's cloud-init |
//! | CLUSTER_NAME | the host's cluster name | the instances' cluster label |
//! | SSH_PUBLIC_KEY | | authorized on the nodes when set |
//! | PRICES | | JSON overriding the built-in price table (see `catalog::Prices`) |
//! | WIREGUARD_HUB_ENDPOINT / WIREGUARD_HUB_PUBLIC_KEY | | the hub node wg0 peers with |
//! | WIREGUARD_HUB_ADDRESS | | the hub's own wg0 address, never handed out |
//! | OPERATION_POLL_MS | 1000 | how often a pending operation is polled |

use crate::catalog::Prices;
use karpenter_plugin_sdk::prelude::*;

#[derive(Debug, Clone)]
pub struct Settings {
    pub api_endpoint: String,
    pub iam_endpoint: String,
    pub credentials_secret: String,
    pub project_id: Option<String>,
    pub service_account_id: String,
    pub bootstrap_token: Option<String>,
    pub kubernetes_version: String,
    pub cluster_name: String,
    pub ssh_public_key: Option<String>,
    pub prices: Result<Prices, String>,
    pub hub_endpoint: String,
    pub hub_public_key: String,
    pub hub_address: Option<String>,
    pub poll_ms: u64,
}

fn get(key: &str) -> Option<String> {
    config::get_setting(key)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

impl Settings {
    pub fn load() -> Settings {
        Settings {
            api_endpoint: get("NEBIUS_API_ENDPOINT")
                .unwrap_or_else(|| "https://compute.api.nebius.cloud:443".into()),
            iam_endpoint: get("NEBIUS_IAM_ENDPOINT")
                .unwrap_or_else(|| "https://tokens.iam.api.nebius.cloud:443".into()),
            credentials_secret: get("NEBIUS_CREDENTIALS_SECRET")
                .unwrap_or_else(|| "nebius-credentials/credentials.json".into()),
            project_id: get("NEBIUS_PROJECT_ID"),
            service_account_id: get("NEBIUS_SERVICE_ACCOUNT_ID").unwrap_or_default(),
            bootstrap_token: get("KUBELET_BOOTSTRAP_TOKEN"),
            kubernetes_version: get("KUBERNETES_VERSION").unwrap_or_else(|| "1.34.2".into()),
            cluster_name: get("CLUSTER_NAME").unwrap_or_else(|| cluster::info().name),
            ssh_public_key: get("SSH_PUBLIC_KEY").filter(|k| k != "ssh-key-not-set"),
            prices: get("PRICES")
                .map(|p| Prices::parse(&p))
                .unwrap_or_else(|| Ok(Prices::default())),
            hub_endpoint: get("WIREGUARD_HUB_ENDPOINT").unwrap_or_default(),
            hub_public_key: get("WIREGUARD_HUB_PUBLIC_KEY").unwrap_or_default(),
            hub_address: get("WIREGUARD_HUB_ADDRESS"),
            poll_ms: get("OPERATION_POLL_MS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1000),
        }
    }
}
