//! The ARM emulator (`azure-emulator`, HTTPS with its own CA) as the Azure
//! end-to-end tests run it, and the azure plugin configured for it.

use super::cluster::{Cluster, PluginSetup};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub const SUBSCRIPTION: &str = "00000000-0000-0000-0000-00000000a2e2";
pub const RESOURCE_GROUP: &str = "rg-aks-flex-e2e";
pub const NODE_RESOURCE_GROUP: &str = "MC_rg-aks-flex-e2e_aks_southcentralus";
pub const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
pub const CLIENT: &str = "0d0b4a36-4fb5-4a2a-9ea5-5c1a8b2e6a11";

fn emulator_bin() -> PathBuf {
    if let Ok(p) = std::env::var("AZURE_EMULATOR_BIN") {
        return p.into();
    }
    // target/<profile>/deps/<this test> -> target/<profile>/azure-emulator
    let exe = std::env::current_exe().expect("test binary");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("azure-emulator");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p azure-emulator` with this test's profile",
        bin.display()
    );
    bin
}

/// The `azure-emulator` process: ARM, the token endpoint and the VMs'
/// kubelets; killed when dropped.
pub struct ArmEmulator {
    child: Child,
    pub base: String,
    pub ca_file: PathBuf,
    http: reqwest::Client,
    stderr: PathBuf,
    dir: tempfile::TempDir,
}

impl ArmEmulator {
    pub fn start(c: &Cluster, fail: &[&str]) -> ArmEmulator {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("emulator-ca.pem");
        let token_file = dir.path().join("kube-token");
        std::fs::write(&token_file, &c.token).expect("token");
        let stderr = dir.path().join("emulator.log");
        let mut cmd = Command::new(emulator_bin());
        cmd.args(["--location", "southcentralus", "--require-auth", "--tls"])
            .arg("--ca-out")
            .arg(&ca_file)
            .args(["--kube-endpoint", &c.endpoint, "--kube-ca-file", &c.ca_file])
            .arg("--kube-token-file")
            .arg(&token_file);
        for f in fail {
            cmd.args(["--fail", f]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("log"))
            .spawn()
            .expect("start azure-emulator");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the emulator says where it listens");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let ca = std::fs::read(&ca_file).expect("the emulator's CA");
        let http = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("pem"))
            .build()
            .expect("client");
        ArmEmulator {
            child,
            base: format!("https://{addr}"),
            ca_file,
            http,
            stderr,
            dir,
        }
    }

    /// The azure plugin with the settings of the seed's values file, its
    /// ARM endpoint this emulator.
    pub fn plugin(&self) -> PluginSetup {
        PluginSetup {
            name: "azure".into(),
            wasm: super::plugin_wasm("azure"),
            config: json!({
                "allowedHosts": [self.base],
                "tokens": true,
                "settings": {
                    "ARM_CLOUD": "AzurePublicCloud",
                    "ARM_ENDPOINT": self.base,
                    "PRICES_ENDPOINT": self.base,
                    "LOCATION": "southcentralus",
                    "ARM_RESOURCE_GROUP": RESOURCE_GROUP,
                    "AZURE_SUBSCRIPTION_ID": SUBSCRIPTION,
                    "AZURE_NODE_RESOURCE_GROUP": NODE_RESOURCE_GROUP,
                    "SSH_PUBLIC_KEY": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2e e2e@karpenter",
                    "VNET_SUBNET_ID": format!("/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Network/virtualNetworks/aks-vnet/subnets/aks"),
                },
                "secretSettings": {"KUBELET_BOOTSTRAP_TOKEN": "kubelet-bootstrap-token/token"},
            }),
            secrets: vec![super::bootstrap_token_secret()],
        }
    }

    /// The controller's environment for Azure workload identity against the
    /// emulator's token endpoint (as the AKS webhook would inject it).
    pub fn identity_env(&self) -> Vec<(String, String)> {
        let federated = self.dir.path().join("federated-token");
        std::fs::write(&federated, "eyJhbGciOiJSUzI1NiJ9.e30.c2ln").expect("token file");
        vec![
            ("AZURE_CLIENT_ID".into(), CLIENT.into()),
            ("AZURE_TENANT_ID".into(), TENANT.into()),
            (
                "AZURE_FEDERATED_TOKEN_FILE".into(),
                federated.to_string_lossy().into_owned(),
            ),
            ("AZURE_AUTHORITY_HOST".into(), self.base.clone()),
        ]
    }

    /// The controller's arguments to trust the emulator's TLS certificate.
    pub fn trust_args(&self) -> Vec<String> {
        vec![
            "--trusted-ca-file".into(),
            self.ca_file.to_string_lossy().into_owned(),
        ]
    }

    pub async fn state(&self) -> Value {
        self.http
            .get(format!("{}/admin/state", self.base))
            .send()
            .await
            .expect("admin state")
            .json()
            .await
            .expect("json")
    }

    /// Sets the subscription's quotas (`/admin/quota`).
    pub async fn set_quota(&self, quota: Value) {
        let r = self
            .http
            .post(format!("{}/admin/quota", self.base))
            .json(&quota)
            .send()
            .await
            .expect("admin quota");
        assert!(r.status().is_success(), "admin quota: {}", r.status());
    }

    /// Posts to `/admin/<what>` (`inject`, `fault`): an error the next
    /// matching requests get.
    pub async fn admin(&self, what: &str, body: Value) {
        let r = self
            .http
            .post(format!("{}/admin/{what}", self.base))
            .json(&body)
            .send()
            .await
            .expect("admin");
        assert!(r.status().is_success(), "admin {what}: {}", r.status());
    }

    pub fn requests(state: &Value) -> Vec<String> {
        state["requests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for ArmEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- emulator log ---\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            );
        }
    }
}

/// VMs of the emulator as (name, size, zone number or "").
pub fn vms(state: &Value) -> Vec<(String, String, String)> {
    state["vmDetails"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (s("key"), s("size"), s("zone"))
        })
        .collect()
}
