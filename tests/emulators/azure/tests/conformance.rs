//! The conformance kit passes for the Azure plugin (built by the test build)
//! against the ARM emulator.

use azure_emulator::{Emulator, Options};
use karpenter::conformance;
use karpenter_runtime::bindings::v0_1_4::karpenter::provider::tokens::AccessToken;
use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::tokens::{TokenFuture, TokenSource};
use karpenter_runtime::{PluginConfig, Runtime, RuntimeOptions};
use std::sync::Arc;

/// Tokens from the emulator's Entra ID endpoint, as workload identity would.
struct EmulatorTokens(String);

impl TokenSource for EmulatorTokens {
    fn token<'a>(&'a self, scopes: &'a [String]) -> TokenFuture<'a> {
        Box::pin(async move {
            let form = format!(
                "client_id=c&grant_type=client_credentials&client_assertion=jwt&scope={}",
                scopes.join(" ")
            );
            let r = reqwest::Client::new()
                .post(format!("{}/tenant/oauth2/v2.0/token", self.0))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            Ok(AccessToken {
                token: v["access_token"]
                    .as_str()
                    .ok_or("no access_token")?
                    .to_string(),
                expires_at: u64::MAX / 2,
            })
        })
    }
}

#[tokio::test]
async fn the_azure_plugin_passes_the_conformance_kit_against_the_emulator() {
    let emulator = Emulator::new(Options {
        location: "westus3".into(),
        require_auth: true,
        op_polls: 1,
        page_size: 2,
        ..Options::default()
    })
    .expect("emulator");
    let (addr, _server) = emulator.clone().serve(0).await.expect("serve");
    let base = format!("http://{addr}");
    let runtime = Runtime::new(RuntimeOptions {
        tokens: Arc::new(EmulatorTokens(base.clone())),
        cluster: Arc::new(ClusterView::new(
            "aks",
            "https://127.0.0.1:6443",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let settings = [
        ("LOCATION", "westus3"),
        ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000001"),
        ("AZURE_NODE_RESOURCE_GROUP", "MC_rg_aks_westus3"),
        ("ARM_RESOURCE_GROUP", "rg"),
        ("VNET_SUBNET_ID", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/vnet/subnets/aks"),
        ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
        ("SSH_PUBLIC_KEY", "ssh-ed25519 AAAAtest"),
        ("ARM_ENDPOINT", &base),
        ("PRICES_ENDPOINT", &base),
        ("CLUSTER_NAME", "aks"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let path = karpenter_test_plugins::path("azure").expect("the test build builds azure");
    let wasm = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plugin = runtime
        .load(
            "azure",
            &wasm,
            PluginConfig {
                allowed_hosts: vec![base.clone()],
                settings,
                tokens: true,
                ..PluginConfig::default()
            },
        )
        .await
        .expect("plugin loads");
    let options = conformance::Options {
        node_class: Some(serde_json::json!({
            "apiVersion": "karpenter.azure.com/v1beta1",
            "kind": "AKSNodeClass",
            "metadata": {"name": "conformance", "generation": 1},
            "spec": {"imageFamily": "Ubuntu"}
        })),
        ..conformance::Options::default()
    };
    let report = conformance::run(&plugin, &options).await;
    eprintln!("{report}");
    assert!(report.passed(), "{report}");
    assert!(
        emulator.vms().is_empty(),
        "the kit deleted what it made: {:?}",
        emulator.vms()
    );
}
