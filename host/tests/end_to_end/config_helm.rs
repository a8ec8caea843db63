//! `karpenter config helm`: the values file of the seed's guide, without a
//! reachable cluster (placeholders), with one (the local control plane made to
//! look like AKS), and with missing or malformed input files (a clear error,
//! nothing written).

use crate::common;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const UNRESOLVED: &str = "<replace-with-actual-value>";

/// Runs `karpenter config helm ARGS` in `dir`, with only the given
/// environment (the test's own must not leak in).
fn config_helm(dir: &Path, kubeconfig: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .current_dir(dir)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .envs(env.iter().copied())
        .args(["config", "helm", "--cluster-timeout", "5s"])
        .args(args)
        .output()
        .expect("karpenter runs")
}

fn env_value(values: &Value, name: &str) -> String {
    values["controller"]["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
        .unwrap_or_else(|| panic!("no {name} in env"))
        .to_string()
}

fn read_values(path: &Path) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("values written")).expect("YAML")
}

/// A kubeconfig whose API server does not answer.
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let port = common::cluster::free_port();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("kubeconfig");
    path
}

#[test]
fn without_a_cluster_everything_else_is_a_placeholder() {
    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    std::fs::write(
        dir.path().join(".env"),
        "export LOCATION=southcentralus\nexport AZURE_SUBSCRIPTION_ID=sub-1\nexport RESOURCE_GROUP_NAME=rg-aks-flex-me\nexport CLUSTER_NAME=from-dotenv\n",
    )
    .expect(".env");
    std::fs::write(dir.path().join("id.pub"), "ssh-ed25519 AAAAC3Nza me@host\n").expect("key");
    // The environment wins over .env.
    let out = config_helm(
        dir.path(),
        &kubeconfig,
        &[("CLUSTER_NAME", "aks")],
        &[
            "--ssh-public-key-file",
            "id.pub",
            "--image",
            "myregistry.io/karpenter:v0.2.0",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("helm upgrade --install karpenter charts/karpenter")
            && stdout.contains("--values karpenter_values.yaml"),
        "prints the install command: {stdout}"
    );
    let v = read_values(&dir.path().join("karpenter_values.yaml"));
    assert_eq!(v["settings"]["clusterName"], "aks");
    assert_eq!(v["settings"]["clusterEndpoint"], UNRESOLVED);
    assert_eq!(v["controller"]["nebiusCredentials"]["enabled"], false);
    assert_eq!(
        v["controller"]["image"]["repository"],
        "myregistry.io/karpenter"
    );
    assert_eq!(v["controller"]["image"]["tag"], "v0.2.0");
    assert_eq!(env_value(&v, "LOCATION"), "southcentralus");
    assert_eq!(env_value(&v, "ARM_RESOURCE_GROUP"), "rg-aks-flex-me");
    assert_eq!(env_value(&v, "AZURE_SUBSCRIPTION_ID"), "sub-1");
    assert_eq!(
        env_value(&v, "SSH_PUBLIC_KEY"),
        "ssh-ed25519 AAAAC3Nza me@host"
    );
    assert!(
        stderr.contains("no kubelet bootstrap token was made")
            && stderr.contains("Secret karpenter/kubelet-bootstrap-token"),
        "says where the token belongs: {stderr}"
    );
    for unresolved in [
        "AZURE_NODE_RESOURCE_GROUP",
        "VNET_SUBNET_ID",
        "AZURE_TENANT_ID",
    ] {
        assert_eq!(env_value(&v, unresolved), UNRESOLVED, "{unresolved}");
        assert!(stderr.contains(unresolved), "names what to edit: {stderr}");
    }
    assert_eq!(env_value(&v, "DISABLE_LEADER_ELECTION"), "false");
}

#[test]
fn missing_or_malformed_files_are_errors_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    std::fs::write(dir.path().join("creds.json"), "not json").expect("write");
    for (args, expected) in [
        (
            vec!["--nebius-credentials-file", "nope.json"],
            "--nebius-credentials-file nope.json",
        ),
        (
            vec!["--ssh-public-key-file", "missing.pub"],
            "--ssh-public-key-file missing.pub",
        ),
        (
            vec!["--nebius-credentials-file", "creds.json"],
            "not a JSON credentials file",
        ),
        (vec!["--env-file", "other.env"], "other.env"),
        (vec!["--image", "repo:"], "--image"),
        (
            vec!["--output", "no/such/dir/values.yaml"],
            "not a directory",
        ),
    ] {
        let out = config_helm(dir.path(), &kubeconfig, &[], &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} fails");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        let written: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("values"))
            .collect();
        assert!(written.is_empty(), "{args:?} wrote {written:?}");
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn with_a_cluster_it_reads_the_api_server_and_makes_a_bootstrap_token() {
    let _serial = SERIAL.lock().await;
    use common::cluster::*;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::Api;
    let c = cluster();
    let client = client(&c).await;
    // What AKS puts on its system pool's nodes and in kube-system.
    apply(
        &c,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "aks-system-12345678-vmss000000", "labels": {
                "kubernetes.azure.com/cluster": "MC_rg-aks-flex-me_aks_southcentralus",
                "kubernetes.azure.com/network-resourcegroup": "rg-aks-flex-me",
                "kubernetes.azure.com/network-name": "aks-vnet",
                "kubernetes.azure.com/network-subnet": "aks",
            }},
            "spec": {
                "providerID": "azure:///subscriptions/sub-1/resourceGroups/mc_rg-aks-flex-me_aks_southcentralus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-system-12345678-vmss/virtualMachines/0",
                "taints": [{"key": "e2e-fake-aks-node", "effect": "NoSchedule"}]
            }
        }),
    );
    apply(
        &c,
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "azure-wi-webhook-config", "namespace": "kube-system"},
            "data": {"AZURE_TENANT_ID": "tenant-1", "AZURE_ENVIRONMENT": "AzurePublicCloud"}
        }),
    );
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("creds.json"),
        "{\"subject-credentials\": {\"type\": \"JWT\"}}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("id.pub"), "ssh-ed25519 AAAAC3Nza me@host\n").expect("write");
    let env = [
        ("LOCATION", "southcentralus"),
        ("AZURE_SUBSCRIPTION_ID", "sub-1"),
        ("RESOURCE_GROUP_NAME", "rg-aks-flex-me"),
        ("CLUSTER_NAME", "aks"),
    ];
    let args = [
        "--nebius-credentials-file",
        "creds.json",
        "--ssh-public-key-file",
        "id.pub",
        "--output",
        "my-values.yaml",
        "--namespace",
        "config-helm-test",
    ];
    let out = config_helm(dir.path(), Path::new(&c.kubeconfig), &env, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("--values my-values.yaml"));
    let v = read_values(&dir.path().join("my-values.yaml"));
    assert_eq!(v["settings"]["clusterEndpoint"], c.endpoint.as_str());
    assert_eq!(
        env_value(&v, "AZURE_NODE_RESOURCE_GROUP"),
        "MC_rg-aks-flex-me_aks_southcentralus"
    );
    assert_eq!(
        env_value(&v, "VNET_SUBNET_ID"),
        "/subscriptions/sub-1/resourceGroups/rg-aks-flex-me/providers/Microsoft.Network/virtualNetworks/aks-vnet/subnets/aks"
    );
    assert_eq!(env_value(&v, "AZURE_TENANT_ID"), "tenant-1");
    assert_eq!(v["controller"]["nebiusCredentials"]["enabled"], true);
    assert_eq!(
        v["controller"]["nebiusCredentials"]["credentialsJson"],
        "{\"subject-credentials\": {\"type\": \"JWT\"}}\n"
    );
    // The only value the cluster cannot tell: the managed identity's client id.
    assert_eq!(env_value(&v, "AZURE_CLIENT_ID"), UNRESOLVED);
    assert!(!stderr.contains("KUBELET_BOOTSTRAP_TOKEN"), "{stderr}");

    // The token is in no value: the plugins read it from a Secret in the
    // release namespace, which expires with the kube-system token.
    assert!(
        v["controller"]["env"]
            .as_array()
            .expect("env")
            .iter()
            .all(|e| e["name"] != "KUBELET_BOOTSTRAP_TOKEN"),
        "no token in the values"
    );
    assert!(
        stderr.contains("kubelet bootstrap token: Secret config-helm-test/kubelet-bootstrap-token"),
        "{stderr}"
    );
    let published = async || {
        let s = Api::<Secret>::namespaced(client.clone(), "config-helm-test")
            .get("kubelet-bootstrap-token")
            .await
            .expect("the published Secret");
        let data = s.data.expect("data");
        let field = |k: &str| String::from_utf8(data[k].0.clone()).expect("utf8");
        (field("token"), field("expiration"))
    };
    let (token, expiration) = published().await;
    let expires: jiff::Timestamp = expiration.parse().expect("RFC 3339");
    let days = (expires - jiff::Timestamp::now()).get_seconds() / 86_400;
    assert!(
        (89..=90).contains(&days),
        "90 days by default: {expiration}"
    );

    // The bootstrap token is a kubeadm-style Secret in kube-system.
    let (id, secret) = token.split_once('.').expect("<id>.<secret>");
    assert!(id.len() == 6 && secret.len() == 16, "{token}");
    let s = Api::<Secret>::namespaced(client.clone(), "kube-system")
        .get(&format!("bootstrap-token-{id}"))
        .await
        .expect("the bootstrap token Secret");
    assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    let data = s.data.expect("data");
    let field = |k: &str| String::from_utf8(data[k].0.clone()).expect("utf8");
    assert_eq!(field("token-secret"), secret);
    assert_eq!(field("expiration"), expiration);
    assert_eq!(field("usage-bootstrap-authentication"), "true");
    assert_eq!(
        field("auth-extra-groups"),
        "system:bootstrappers:kubeadm:default-node-token"
    );

    // A second run reuses it rather than piling up tokens...
    let out = config_helm(dir.path(), Path::new(&c.kubeconfig), &env, &args);
    assert!(out.status.success());
    assert_eq!(published().await.0, token);
    // ...until less than half its lifetime is left: then it rotates, and the
    // Secret the controller reads holds the new token.
    let longer = [&args[..], &["--bootstrap-token-ttl", "8760h"]].concat();
    let out = config_helm(dir.path(), Path::new(&c.kubeconfig), &env, &longer);
    assert!(out.status.success());
    let (rotated, _) = published().await;
    assert_ne!(rotated, token);
    let rotated_id = rotated
        .split_once('.')
        .expect("<id>.<secret>")
        .0
        .to_string();

    // The chart takes the file as written.
    let helm = helm_bin(&c);
    let out = Command::new(helm)
        .args(["template", "karpenter"])
        .arg(repo().join("charts/karpenter"))
        .args(["--namespace", "karpenter", "--values"])
        .arg(dir.path().join("my-values.yaml"))
        .output()
        .expect("helm");
    let rendered = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        rendered.contains("name: nebius-credentials"),
        "the Secret is rendered"
    );

    kubectl(&c, &["delete", "node", "aks-system-12345678-vmss000000"]);
    kubectl(
        &c,
        &[
            "-n",
            "kube-system",
            "delete",
            "configmap",
            "azure-wi-webhook-config",
        ],
    );
    kubectl(
        &c,
        &[
            "-n",
            "kube-system",
            "delete",
            "secret",
            &format!("bootstrap-token-{id}"),
            &format!("bootstrap-token-{rotated_id}"),
        ],
    );
    kubectl(
        &c,
        &["delete", "namespace", "config-helm-test", "--wait=false"],
    );
}
