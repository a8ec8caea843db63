//! A fresh local control plane per run (tests/cluster), with an audit log of
//! the controller's requests and an identity of its own for the controller.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The controller's identity: every request it (and a plugin acting for it)
/// makes carries this user, so the audit log attributes them exactly.
pub const CONTROLLER_USER: &str = "system:serviceaccount:kube-system:peer-controller";

/// The audit policy: the controller's requests at Metadata level, each once
/// (no RequestReceived stage); nothing else.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["system:serviceaccount:kube-system:peer-controller"]
- level: None
"#;

/// The controller-manager's requests a second. At its default, 20, its node
/// controller (about four requests per new node: not-ready taints on and
/// off) paces how fast new nodes take pods, for both controllers alike, and
/// hides how fast each launches them.
const KCM_QPS: u32 = 200;

pub struct Cluster {
    pub name: String,
    pub data: PathBuf,
    pub endpoint: String,
    pub ca_file: PathBuf,
    pub bin: PathBuf,
    pub client: kube::Client,
    admin_kubeconfig: PathBuf,
    keep: bool,
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Cluster {
    pub async fn up(name: &str, scratch: &Path, keep: bool) -> Result<Cluster> {
        let policy = scratch.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY)?;
        let status = Command::new(repo().join("tests/cluster/up"))
            .arg(name)
            .env("CLUSTER_AUDIT_POLICY", &policy)
            .env("CLUSTER_KCM_QPS", KCM_QPS.to_string())
            .stdout(Stdio::null())
            .status()
            .context("tests/cluster/up")?;
        if !status.success() {
            bail!("tests/cluster/up {name} failed ({status})");
        }
        let root = std::env::var_os("XDG_RUNTIME_DIR")
            .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        let data = root.join("karpenter-clusters").join(name);
        let env = read_env(&data.join("env"))?;
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .with_context(|| format!("{k} missing from the cluster's env"))
        };
        let admin_kubeconfig = PathBuf::from(get("KUBECONFIG")?);
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&admin_kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        Ok(Cluster {
            name: name.into(),
            data,
            endpoint: get("CLUSTER_ENDPOINT")?,
            ca_file: PathBuf::from(get("CLUSTER_CA_FILE")?),
            bin: PathBuf::from(get("CLUSTER_BIN_DIR")?),
            client: kube::Client::try_from(config)?,
            admin_kubeconfig,
            keep,
        })
    }

    pub fn audit_log(&self) -> PathBuf {
        self.data.join("audit.log")
    }

    /// `kubectl` as the admin, with `stdin` piped in when given.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut child = Command::new(self.bin.join("kubectl"))
            .args(args)
            .env("KUBECONFIG", &self.admin_kubeconfig)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("kubectl")?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .context("stdin")?
                .write_all(input.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Applies JSON or YAML documents (server-side, as the admin).
    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(manifest),
        )?;
        Ok(())
    }

    /// A service account bound to cluster-admin (both controllers get the same
    /// rights) and a day-long token for it, as a kubeconfig file and the bare
    /// token.
    pub async fn controller_identity(&self, dir: &Path) -> Result<(PathBuf, String)> {
        self.apply(
            &json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "peer-controller", "namespace": "kube-system"}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": "peer-controller"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": "peer-controller", "namespace": "kube-system"}]}
            ]})
            .to_string(),
        )?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), "kube-system");
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(86_400),
                ..Default::default()
            }),
            ..Default::default()
        };
        let issued = accounts
            .create_token_request("peer-controller", &PostParams::default(), &request)
            .await
            .context("token for the controller")?;
        let token = issued
            .status
            .and_then(|s| s.token)
            .context("the token request returned no token")?;
        let kubeconfig = dir.join("controller.kubeconfig");
        let doc = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "peer",
            "clusters": [{"name": "peer", "cluster": {"server": self.endpoint, "certificate-authority": self.ca_file}}],
            "users": [{"name": "peer-controller", "user": {"token": token}}],
            "contexts": [{"name": "peer", "context": {"cluster": "peer", "user": "peer-controller"}}],
        });
        std::fs::write(&kubeconfig, doc.to_string())?;
        Ok((kubeconfig, token))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.keep {
            eprintln!(
                "[peer] kept cluster {} ({})",
                self.name,
                self.data.display()
            );
            return;
        }
        let _ = Command::new(repo().join("tests/cluster/down"))
            .arg(&self.name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn read_env(path: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
        .collect())
}
