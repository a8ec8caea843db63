//! The Nebius emulator (in process, gRPC over h2c) and the nebius plugin
//! configured for it.

use super::cluster::{Cluster, PluginSetup};
use nebius_emulator::{Emulator, Kube, Options};
use serde_json::json;
use std::sync::Arc;

/// The WireGuard hub's address in the plugin's settings.
pub const HUB_ADDRESS: &str = "100.96.0.1";

/// The emulator serving h2c on 127.0.0.1, playing each instance's kubelet
/// against `c`.
pub async fn emulator(c: &Cluster) -> (Arc<Emulator>, String, tokio::task::JoinHandle<()>) {
    let emulator = Emulator::new(Options {
        kube: Some(Kube {
            endpoint: c.endpoint.clone(),
            ca_pem: std::fs::read(&c.ca_file).expect("ca"),
            token: c.token.clone(),
        }),
        ..Options::default()
    })
    .expect("emulator");
    let (addr, server) = emulator.clone().serve(0).await.expect("serve");
    (emulator, addr.to_string(), server)
}

/// The Nebius plugin as an operator would configure it for the emulator.
pub fn nebius_plugin(addr: &str) -> PluginSetup {
    let base = format!("http://{addr}");
    PluginSetup {
        name: "nebius".into(),
        wasm: super::plugin_wasm("nebius"),
        config: json!({
            "allowedHosts": [base],
            "h2cHosts": [addr],
            "secrets": ["nebius-credentials/credentials.json"],
            "settings": {
                "NEBIUS_API_ENDPOINT": base,
                "NEBIUS_IAM_ENDPOINT": base,
                "OPERATION_POLL_MS": "100",
                "WIREGUARD_HUB_ENDPOINT": "20.91.194.208:51820",
                "WIREGUARD_HUB_PUBLIC_KEY": "aHViLXB1YmxpYy1rZXk=",
                "WIREGUARD_HUB_ADDRESS": HUB_ADDRESS,
            },
            "secretSettings": {"KUBELET_BOOTSTRAP_TOKEN": "kubelet-bootstrap-token/token"},
        }),
        secrets: vec![
            (
                "nebius-credentials/credentials.json".into(),
                nebius_emulator::iam::test_credentials().to_vec(),
            ),
            super::bootstrap_token_secret(),
        ],
    }
}
