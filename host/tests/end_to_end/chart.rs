//! The Helm chart (charts/karpenter): lint and render with the seed's values
//! file, install into the local control plane, run the controller with
//! exactly the chart's ServiceAccount permissions through the inflate flow,
//! and swap a plugin through its ConfigMap under load.
//!
//! Needs a cluster from `tests/cluster/up NAME` with
//! `KARPENTER_TEST_CLUSTER=NAME` (helm and kubectl come from its bin
//! directory); `.ci/run` makes one.

use crate::common;

use common::cluster::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use karpenter_runtime::PluginConfig;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub(crate) fn chart() -> PathBuf {
    repo().join("charts/karpenter")
}

pub(crate) fn seed_values() -> PathBuf {
    repo().join("tests/chart/seed-values.yaml")
}

pub(crate) fn helm(c: &Cluster, args: &[&str]) -> String {
    let out = Command::new(helm_bin(c))
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm template` of `chart_dir` as JSON documents.
fn render(c: &Cluster, chart_dir: &Path, values: &[&Path], sets: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template".to_string(),
        "karpenter".into(),
        chart_dir.display().to_string(),
        "--namespace".into(),
        "karpenter".into(),
    ];
    for v in values {
        args.extend(["--values".into(), v.display().to_string()]);
    }
    for s in sets {
        args.extend(["--set".into(), s.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = helm(c, &args);
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

pub(crate) fn base64(bytes: &[u8]) -> String {
    serde_json::to_value(ByteString(bytes.to_vec()))
        .expect("base64")
        .as_str()
        .expect("string")
        .to_string()
}

/// The plugin's `<name>.yaml` from its rendered ConfigMap, as the host reads it.
fn plugin_config(docs: &[Value], name: &str) -> PluginConfig {
    let cm = find(docs, "ConfigMap", &format!("karpenter-plugin-{name}"))
        .unwrap_or_else(|| panic!("no ConfigMap for plugin {name}"));
    PluginConfig::from_yaml(cm["data"][format!("{name}.yaml")].as_str().expect("yaml"))
        .expect("a valid plugin configuration")
}

/// Every rule of the chart's ClusterRoles and Roles: no wildcards, no
/// Secrets, and nothing outside the resources the controller works with.
fn assert_least_privilege(docs: &[Value]) {
    let allowed: BTreeSet<&str> = [
        "karpenter.sh/nodepools",
        "karpenter.sh/nodepools/status",
        "karpenter.sh/nodeclaims",
        "karpenter.sh/nodeclaims/status",
        "karpenter.sh/nodeoverlays",
        "karpenter.sh/nodeoverlays/status",
        "autoscaling.x-k8s.io/capacitybuffers",
        "autoscaling.x-k8s.io/capacitybuffers/status",
        "/nodes",
        "/pods",
        "/pods/eviction",
        "/podtemplates",
        "apps/daemonsets",
        "apps/deployments",
        "apps/statefulsets",
        "apps/replicasets",
        "policy/poddisruptionbudgets",
        "events.k8s.io/events",
        "coordination.k8s.io/leases",
    ]
    .into();
    let mut roles = of_kind(docs, "ClusterRole");
    roles.extend(of_kind(docs, "Role"));
    assert!(!roles.is_empty());
    for role in roles {
        let cluster_wide = role["kind"] == "ClusterRole";
        for rule in role["rules"].as_array().expect("rules") {
            let verbs = strings(&rule["verbs"]);
            let groups = strings(&rule["apiGroups"]);
            let resources = strings(&rule["resources"]);
            assert!(
                !verbs.is_empty() && !resources.is_empty(),
                "explicit rule: {rule}"
            );
            for s in verbs.iter().chain(&groups).chain(&resources) {
                assert!(!s.contains('*'), "no wildcards: {rule}");
            }
            for g in &groups {
                for r in &resources {
                    let key = format!("{g}/{r}");
                    let node_class = r.contains("nodeclasses");
                    assert!(
                        allowed.contains(key.as_str()) || node_class,
                        "{key} is not something the controller works with: {rule}"
                    );
                    assert!(!r.starts_with("secrets"), "no Secrets: {rule}");
                    if key == "coordination.k8s.io/leases" {
                        assert!(!cluster_wide, "leases only in the release's namespace");
                    }
                    if node_class {
                        assert!(
                            verbs
                                .iter()
                                .all(|v| ["get", "list", "watch", "patch"].contains(&v.as_str())),
                            "NodeClasses are read and their status written: {rule}"
                        );
                    }
                }
            }
            for v in &verbs {
                assert!(
                    !["escalate", "bind", "impersonate", "update"].contains(&v.as_str())
                        || (v == "update" && !cluster_wide),
                    "{v} is not needed: {rule}"
                );
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER (and helm from its bin directory)"]
async fn lint_and_render_the_seed_values() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let seed = seed_values();
    helm(
        &c,
        &[
            "lint",
            "--strict",
            chart().to_str().expect("path"),
            "--values",
            seed.to_str().expect("path"),
        ],
    );
    let docs = render(&c, &chart(), &[&seed], &[]);

    let deploy = find(&docs, "Deployment", "karpenter").expect("a Deployment");
    let spec = &deploy["spec"]["template"]["spec"];
    assert_eq!(deploy["spec"]["replicas"], 1, "replicas from the seed");
    assert_eq!(
        deploy["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"],
        "true"
    );
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &spec["containers"][0];
    let sc = &container["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert!(container["resources"]["limits"]["memory"].is_string());
    let env: BTreeMap<String, Value> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().expect("name").to_string(),
                e["value"].clone(),
            )
        })
        .collect();
    assert_eq!(env["CLUSTER_NAME"], "aks");
    assert_eq!(
        env["CLUSTER_ENDPOINT"],
        "https://aks-xxxx.hcp.eastus2.azmk8s.io:443"
    );
    assert_eq!(
        env["DISABLE_LEADER_ELECTION"], "false",
        "the seed's env passes through"
    );
    assert_eq!(env["AZURE_CLIENT_ID"], "<karpenter-flex-client-id>");
    assert_eq!(env["LOG_LEVEL"], "info,karpenter=debug");
    assert!(
        spec["affinity"]["podAntiAffinity"].is_object()
            && spec["topologySpreadConstraints"].is_array(),
        "replicas spread"
    );
    let sa = find(&docs, "ServiceAccount", "karpenter").expect("a ServiceAccount");
    assert_eq!(
        sa["metadata"]["annotations"]["azure.workload.identity/client-id"],
        "<karpenter-flex-client-id>"
    );
    assert!(find(&docs, "PodDisruptionBudget", "karpenter").is_some());
    let svc = find(&docs, "Service", "karpenter").expect("a metrics Service");
    assert_eq!(svc["spec"]["ports"][0]["name"], "http-metrics");

    // Plugins: one ConfigMap each. The bundled ones are built into the
    // binary: their ConfigMap holds only their grants, naming the provider.
    let cm = find(&docs, "ConfigMap", "karpenter-plugin-azure").expect("azure's ConfigMap");
    assert!(cm.get("binaryData").is_none(), "{cm}");
    assert_eq!(
        cm["data"]
            .as_object()
            .map(|d| d.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["azure.yaml".to_string()])
    );
    for name in ["azure", "nebius"] {
        let source = plugin_config(&docs, name).source.expect("a source");
        assert_eq!(source.builtin.as_deref(), Some(name));
    }
    let azure = plugin_config(&docs, "azure");
    assert_eq!(azure.settings["LOCATION"], "southcentralus");
    assert_eq!(
        azure.settings["KUBELET_BOOTSTRAP_TOKEN"],
        "<token-id>.<token-secret>"
    );
    assert!(
        azure.secret_settings.is_empty(),
        "a token in controller.env takes precedence over the Secret"
    );
    assert!(!azure.settings.contains_key("DISABLE_LEADER_ELECTION"));
    assert!(azure.tokens && azure.secrets.is_empty());
    let projected: Vec<String> = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter(|v| v["name"] == "plugins")
        .flat_map(|v| {
            v["projected"]["sources"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|s| s["configMap"]["name"].as_str().expect("name").to_string())
        .collect();
    let config_maps: Vec<String> = of_kind(&docs, "ConfigMap")
        .iter()
        .map(|cm| cm["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    assert_eq!(projected, config_maps, "every plugin ConfigMap is mounted");

    // The seed enables Nebius credentials without embedding them: no Secret
    // is made, an existing one is mounted if present.
    assert!(of_kind(&docs, "Secret").is_empty());
    assert_least_privilege(&docs);
    let rules = serde_json::to_string(&of_kind(&docs, "ClusterRole")).expect("json");
    assert!(rules.contains("aksnodeclasses/status"), "azure's NodeClass");

    // Credentials embedded: the Secret, mounted, granted to Nebius alone.
    let tmp = tempfile::tempdir().expect("tmp");
    let creds = tmp.path().join("creds-values.yaml");
    let embedded = json!({"controller": {"nebiusCredentials": {"credentialsJson": "{\"subject-credentials\": {}}"}}});
    std::fs::write(&creds, embedded.to_string()).expect("write");
    let docs = render(&c, &chart(), &[&seed, &creds], &[]);
    let secret = find(&docs, "Secret", "nebius-credentials").expect("the Secret");
    assert!(secret["data"]["credentials.json"].is_string());
    assert_eq!(
        plugin_config(&docs, "nebius").secrets,
        ["nebius-credentials/credentials.json"]
    );
    assert!(
        plugin_config(&docs, "azure").secrets.is_empty(),
        "only Nebius may read it"
    );
    let spec =
        &find(&docs, "Deployment", "karpenter").expect("Deployment")["spec"]["template"]["spec"];
    let mounted = serde_json::to_string(&spec["volumes"]).expect("json");
    assert!(
        mounted.contains("nebius-credentials/credentials.json"),
        "{mounted}"
    );
    assert_least_privilege(&docs);

    // Without a token in the environment (as `karpenter config helm` writes
    // values), the plugins that join nodes read it from its Secret, and no
    // ConfigMap holds it.
    let no_token = tmp.path().join("no-token-values.yaml");
    let mut values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&seed).expect("seed")).expect("yaml");
    values["controller"]["env"]
        .as_array_mut()
        .expect("env")
        .retain(|e| e["name"] != "KUBELET_BOOTSTRAP_TOKEN");
    std::fs::write(&no_token, values.to_string()).expect("write");
    let docs = render(&c, &chart(), &[&no_token], &[]);
    for plugin in ["azure", "nebius"] {
        let config = plugin_config(&docs, plugin);
        assert_eq!(
            config.secret_settings["KUBELET_BOOTSTRAP_TOKEN"], "kubelet-bootstrap-token/token",
            "{plugin}"
        );
        assert!(!config.settings.contains_key("KUBELET_BOOTSTRAP_TOKEN"));
        assert!(
            config
                .secrets
                .iter()
                .all(|s| !s.starts_with("kubelet-bootstrap-token/"))
        );
    }
    let spec =
        &find(&docs, "Deployment", "karpenter").expect("Deployment")["spec"]["template"]["spec"];
    let mounted = serde_json::to_string(&spec["volumes"]).expect("json");
    assert!(
        mounted.contains(r#""name":"kubelet-bootstrap-token","optional":true"#),
        "mounted when it exists: {mounted}"
    );
    assert!(
        of_kind(&docs, "Secret").is_empty(),
        "the chart never holds it"
    );

    // Disabled: neither Secret nor secrets directory.
    let docs = render(
        &c,
        &chart(),
        &[&seed],
        &[
            "controller.nebiusCredentials.enabled=false",
            "controller.kubeletBootstrapToken.enabled=false",
        ],
    );
    assert!(of_kind(&docs, "Secret").is_empty());
    let deploy = serde_json::to_string(find(&docs, "Deployment", "karpenter").expect("Deployment"))
        .expect("json");
    assert!(!deploy.contains("SECRETS_DIR") && !deploy.contains("nebius-credentials"));
    assert!(!deploy.contains("kubelet-bootstrap-token"));

    // Another build of a bundled plugin from a volume, and a third-party
    // plugin from a pinned URL: configuration only, the volume mounted.
    let sha = "ab".repeat(32);
    let docs = render(
        &c,
        &chart(),
        &[&seed],
        &[
            "plugins.volume.image.reference=registry.example.com/plugins:v1",
            "plugins.bundled.azure.source.volume=azure-v2.wasm",
            "plugins.extra.big.source.url=https://plugins.example.com/big.wasm",
            &format!("plugins.extra.big.source.sha256={sha}"),
            &format!(
                "plugins.extra.pulled.source.oci=registry.example.com/p/pulled:1@sha256:{sha}"
            ),
            "plugins.extra.pulled.source.pullSecret=regcred",
        ],
    );
    let pulled = plugin_config(&docs, "pulled").source.expect("a source");
    assert_eq!(pulled.pull_secret.as_deref(), Some("regcred"));
    let azure = plugin_config(&docs, "azure").source.expect("a source");
    assert_eq!(azure.volume.as_deref(), Some("azure-v2.wasm"));
    assert_eq!(azure.builtin, None);
    let big = plugin_config(&docs, "big").source.expect("a source");
    assert_eq!(big.sha256.as_deref(), Some(sha.as_str()));
    let deploy = find(&docs, "Deployment", "karpenter").expect("Deployment");
    let spec = &deploy["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "plugin-volume")
        .expect("the plugin volume");
    assert_eq!(
        volume["image"]["reference"],
        "registry.example.com/plugins:v1"
    );
    let deploy = serde_json::to_string(deploy).expect("json");
    assert!(deploy.contains(r#""name":"PLUGIN_VOLUME","value":"/etc/karpenter/plugin-volume""#));
    // The pull secret is mounted for the loader, key `.dockerconfigjson`.
    assert!(
        deploy.contains(r#"{"items":[{"key":".dockerconfigjson","path":"regcred/.dockerconfigjson"}],"name":"regcred","optional":false}"#),
        "{deploy}"
    );
}

/// What the controller itself needs beside its plugins' budgets: its stores
/// and the child compiler's peak, with room to spare.
const CONTROLLER_OWN_MIB: u64 = 256;

/// Every bundled plugin's memory budget, parsed as the host parses it, and
/// the controller's own share fit in the chart's memory limit.
#[test]
fn bundled_plugin_budgets_fit_the_memory_limit() {
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values"),
    )
    .expect("YAML");
    let limit = values["controller"]["resources"]["limits"]["memory"]
        .as_str()
        .expect("controller.resources.limits.memory");
    let limit_mib = match (limit.strip_suffix("Gi"), limit.strip_suffix("Mi")) {
        (Some(g), _) => g.parse::<u64>().expect("Gi") * 1024,
        (_, Some(m)) => m.parse::<u64>().expect("Mi"),
        _ => panic!("limit {limit} in Mi or Gi"),
    };
    let mut budgets = 0;
    for (name, p) in values["plugins"]["bundled"].as_object().expect("bundled") {
        let grants: serde_json::Map<String, Value> = p
            .as_object()
            .expect("plugin")
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "enabled" | "nodeClasses" | "settingsFromEnv"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // JSON is YAML.
        let config = karpenter_runtime::PluginConfig::from_yaml(&Value::Object(grants).to_string())
            .unwrap_or_else(|e| panic!("plugin {name:?}: {e:#}"));
        budgets += config.memory_budget_mib;
    }
    assert!(
        budgets + CONTROLLER_OWN_MIB <= limit_mib,
        "bundled plugins' budgets ({budgets} MiB) and the controller's own {CONTROLLER_OWN_MIB} MiB exceed the limit of {limit}"
    );
}

/// The committed CRDs of the bundled plugins are what `karpenter plugin crd`
/// prints for the plugins built now.
#[test]
fn bundled_node_class_crds_match_the_plugins() {
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("values.yaml")).expect("values"),
    )
    .expect("YAML");
    let bundled = values["plugins"]["bundled"].as_object().expect("bundled");
    assert!(!bundled.is_empty(), "the chart bundles plugins");
    for name in bundled.keys() {
        let wasm = common::plugin_path(name);
        let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(["plugin", "crd"])
            .arg(&wasm)
            .output()
            .expect("karpenter plugin crd");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = chart().join(format!("crds/plugin-{name}.yaml"));
        let committed = std::fs::read(&file).unwrap_or_default();
        assert!(
            committed == out.stdout,
            "{} differs from `karpenter plugin crd {}`: run `make chart-crds`",
            file.display(),
            wasm.display()
        );
    }
    for entry in std::fs::read_dir(chart().join("crds")).expect("crds") {
        let file = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if let Some(name) = file
            .strip_prefix("plugin-")
            .and_then(|f| f.strip_suffix(".yaml"))
        {
            assert!(
                bundled.contains_key(name),
                "{file}: {name} is not a bundled plugin"
            );
        }
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn installs_with_the_seeds_command() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    let seed = seed_values();
    // The seed's command, run from the repository root.
    helm(
        &c,
        &[
            "upgrade",
            "--install",
            "karpenter",
            chart().to_str().expect("path"),
            "--namespace",
            "karpenter",
            "--create-namespace",
            "--values",
            seed.to_str().expect("path"),
            "--wait=false",
        ],
    );
    let status = helm(
        &c,
        &[
            "status",
            "karpenter",
            "--namespace",
            "karpenter",
            "-o",
            "json",
        ],
    );
    let status: Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["info"]["status"], "deployed");
    // Helm keeps the release in a Secret of at most 1 MiB; the bundled
    // plugins are not in it.
    let release =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "karpenter")
            .list(&ListParams::default().labels("owner=helm,name=karpenter"))
            .await
            .expect("release Secrets");
    let size = release
        .items
        .iter()
        .filter_map(|s| Some(s.data.as_ref()?.get("release")?.0.len()))
        .max()
        .expect("a release Secret");
    eprintln!("helm release Secret: {size} bytes of 1048576");
    assert!(
        size < 128 << 10,
        "{size} bytes: a plugin's bytes are in the release again"
    );
    let deploy = Api::<Deployment>::namespaced(client.clone(), "karpenter")
        .get("karpenter")
        .await
        .expect("the Deployment exists");
    assert_eq!(deploy.spec.replicas, Some(1));
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "karpenter")
        .get("karpenter-plugin-azure")
        .await
        .expect("the plugin ConfigMap");
    let config = PluginConfig::from_yaml(&cm.data.expect("data")["azure.yaml"])
        .expect("a plugin configuration");
    assert_eq!(
        config.source.and_then(|s| s.builtin).as_deref(),
        Some("azure"),
        "the bundled plugin comes from the controller binary"
    );
    for crd in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "aksnodeclasses.karpenter.azure.com",
        "nebiusnodeclasses.flex.aks.azure.com",
    ] {
        kubectl(&c, &["get", "crd", crd]);
    }
    // What the ServiceAccount may do, as the API server's authorizer says.
    let sa = "system:serviceaccount:karpenter:karpenter";
    let can = |verb: &str, what: &str, ns: Option<&str>| {
        let mut args = vec!["auth", "can-i", verb, "--as", sa];
        match what.split_once('/') {
            Some((resource, sub)) => args.extend([resource, "--subresource", sub]),
            None => args.push(what),
        }
        match ns {
            Some(ns) => args.extend(["-n", ns]),
            None => args.push("--all-namespaces"),
        }
        let out = Command::new(&c.kubectl)
            .args(&args)
            .env("KUBECONFIG", &c.kubeconfig)
            .output()
            .expect("kubectl");
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    assert!(can("create", "nodeclaims.karpenter.sh", None));
    assert!(can("create", "pods/eviction", None));
    assert!(can(
        "patch",
        "aksnodeclasses.karpenter.azure.com/status",
        None
    ));
    assert!(can(
        "create",
        "leases.coordination.k8s.io",
        Some("karpenter")
    ));
    assert!(!can(
        "create",
        "leases.coordination.k8s.io",
        Some("kube-system")
    ));
    for ns in [None, Some("karpenter"), Some("kube-system")] {
        assert!(!can("get", "secrets", ns), "no Secrets in {ns:?}");
        assert!(!can("list", "secrets", ns), "no Secrets in {ns:?}");
    }
    assert!(!can("create", "pods", None));
    assert!(!can("update", "nodes", None));
    assert!(!can("*", "*", None));
}

/// Installs `release` into its own namespace with the kwok plugin as a
/// third-party plugin (`plugins.extra`), the bundled ones off.
fn install_kwok(c: &Cluster, release: &str, wasm: &[u8], mut settings: Value) {
    // The plugin's own credential (its "cloud" is the API server), from the
    // Secret the chart mounts as `<secret>/<key>`.
    settings["TOKEN_SECRET"] = json!("kwok-kube/token");
    let values = json!({
        "replicas": 1,
        "settings": {"clusterName": "e2e", "clusterEndpoint": c.endpoint},
        "plugins": {
            "bundled": {"azure": {"enabled": false}, "nebius": {"enabled": false}},
            "extra": {"kwok": {
                "wasmBase64": base64(wasm),
                "nodeClasses": [{"group": "karpenter.kwok.sh", "resource": "kwoknodeclasses"}],
                "allowedHosts": [c.endpoint],
                "secrets": ["kwok-kube/token"],
                "settings": settings,
            }},
        },
        "controller": {"extraSecrets": [{"name": "kwok-kube", "keys": ["token"]}]},
    });
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(file.path(), values.to_string()).expect("write");
    helm(
        c,
        &[
            "upgrade",
            "--install",
            release,
            chart().to_str().expect("path"),
            "--namespace",
            release,
            "--create-namespace",
            "--values",
            file.path().to_str().expect("path"),
            "--wait=false",
        ],
    );
}

/// Writes the plugin ConfigMaps of `ns` into `dir` the way kubelet updates a
/// ConfigMap volume: a new timestamped directory, then one rename of the
/// `..data` symlink, then the old directory removed.
async fn project_config_maps(client: &Client, ns: &str, dir: &Path, generation: u32) {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("karpenter.sh/plugin"))
        .await
        .expect("list ConfigMaps");
    let fresh = dir.join(format!("..gen{generation}"));
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let mut names = Vec::new();
    for cm in cms.items {
        for (k, v) in cm.data.unwrap_or_default() {
            std::fs::write(fresh.join(&k), v).expect("write");
            names.push(k);
        }
        for (k, v) in cm.binary_data.unwrap_or_default() {
            std::fs::write(fresh.join(&k), v.0).expect("write");
            names.push(k);
        }
    }
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..gen{generation}"), &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    for name in names {
        let link = dir.join(&name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{name}"), &link).expect("symlink");
        }
    }
    if generation > 1 {
        std::fs::remove_dir_all(dir.join(format!("..gen{}", generation - 1))).expect("rm old");
    }
}

/// The controller as the chart's pod runs it: the Deployment's environment,
/// the ServiceAccount's own token, the plugins from the ConfigMaps and the
/// secrets the chart mounts.
struct ChartController {
    controller: Controller,
    plugins: PathBuf,
    _dir: tempfile::TempDir,
}

async fn start_as_the_chart(c: &Cluster, client: &Client, release: &str) -> ChartController {
    let ns = release;
    let dir = tempfile::tempdir().expect("tmp");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).expect("mkdir");
    project_config_maps(client, ns, &plugins, 1).await;
    kubectl(
        c,
        &[
            "-n",
            ns,
            "create",
            "secret",
            "generic",
            "kwok-kube",
            "--from-literal",
            &format!("token={}", c.token),
        ],
    );
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(secrets.join("kwok-kube")).expect("mkdir");
    std::fs::write(secrets.join("kwok-kube/token"), &c.token).expect("write");

    let token = kubectl(
        c,
        &["-n", ns, "create", "token", release, "--duration", "2h"],
    );
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": c.endpoint, "certificate-authority": c.ca_file}}],
            "users": [{"name": "sa", "user": {"token": token.trim()}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa", "namespace": ns}}],
            "current-context": "c",
        })
        .to_string(),
    )
    .expect("kubeconfig");

    let deploy = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(release)
        .await
        .expect("the chart's Deployment");
    let container = deploy.spec.template.spec.expect("pod spec").containers[0].clone();
    assert_eq!(
        container
            .security_context
            .and_then(|s| s.read_only_root_filesystem),
        Some(true)
    );
    let mut env: Vec<(String, String)> = Vec::new();
    for e in container.env.unwrap_or_default() {
        let value = match (e.value, e.name.as_str()) {
            (Some(v), _) => v,
            (None, "POD_NAME") => format!("{release}-0"),
            (None, "SYSTEM_NAMESPACE") => ns.to_string(),
            (None, other) => panic!("{other}: an env source the test does not know"),
        };
        env.push((e.name, value));
    }
    // The pod's paths, here.
    for (k, v) in [
        ("PLUGIN_DIR", plugins.display().to_string()),
        ("SECRETS_DIR", secrets.display().to_string()),
        ("CLUSTER_CA_FILE", c.ca_file.clone()),
        ("GC_INTERVAL", "5s".into()),
    ] {
        env.retain(|(name, _)| name != k);
        env.push((k.to_string(), v));
    }
    let controller = Controller::start_as_deployment(Launch {
        kubeconfig: &kubeconfig,
        env,
    });
    ChartController {
        controller,
        plugins,
        _dir: dir,
    }
}

fn assert_never_forbidden(controller: &Controller) {
    let log = controller.log();
    let forbidden: Vec<&str> = log
        .lines()
        // RBAC's denial names the user; other 403s (a terminating
        // namespace refusing an eviction) are not about permissions.
        .filter(|l| l.contains("forbidden") && l.contains("system:serviceaccount"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "requests were denied:\n{}",
        forbidden.join("\n")
    );
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn the_charts_service_account_is_enough_for_inflate() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let release = "karpenter-rbac";
    let _ = kubectl_ok(&c, &["delete", "namespace", release, "--wait=true"]);
    install_kwok(&c, release, &common::plugin_wasm("kwok"), json!({}));
    let chart = start_as_the_chart(&c, &client, release).await;
    let controller = &chart.controller;

    let (ns, pool) = (
        &format!("e2e-chart-{}", std::process::id()),
        &format!("chart-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "inflate", pool, 5, "1", false));
    wait_for("5 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 5)
    })
    .await;
    wait_for("NodeClaims Ready", Duration::from_secs(30), || {
        claims_ready(&client, pool)
    })
    .await;
    // Leader election ran in the release's namespace, under the chart's Role.
    let lease = kubectl(
        &c,
        &[
            "-n",
            release,
            "get",
            "lease",
            "karpenter-leader-election",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    assert_eq!(lease, format!("{release}-0"));
    // Events were written.
    let events = kubectl(
        &c,
        &["get", "events", "-A", "-o", "custom-columns=REASON:.reason"],
    );
    assert!(events.lines().any(|l| l == "Ready"), "{events}");
    // Termination: NodeClaims, Nodes and finalizers, with the same rights.
    clean_up(&client, ns, pool).await;
    assert_never_forbidden(controller);
    helm(&c, &["uninstall", release, "--namespace", release]);
    kubectl(&c, &["delete", "namespace", release, "--wait=false"]);
}

/// kubectl that may fail.
pub(crate) fn kubectl_ok(c: &Cluster, args: &[&str]) -> bool {
    Command::new(&c.kubectl)
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_config_map_update_swaps_the_plugin_under_load() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let release = "karpenter-reload";
    let _ = kubectl_ok(&c, &["delete", "namespace", release, "--wait=true"]);
    let original = common::plugin_wasm("kwok");
    install_kwok(&c, release, &original, json!({}));
    let chart = start_as_the_chart(&c, &client, release).await;
    let controller = &chart.controller;

    let (ns, pool) = (
        &format!("e2e-reload-{}", std::process::id()),
        &format!("reload-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    const N: i32 = 24;
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    // One node per pod: every pod is a launch.
    apply(&c, deployment(ns, "reload", pool, 0, "100m", true));
    wait_for("the plugin loaded", Duration::from_secs(60), || async {
        let loaded = controller
            .log()
            .lines()
            .any(|l| l.contains("plugin loaded"));
        if loaded {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;

    // Pods arrive in steps; the plugin changes (new bytes, new settings)
    // while launches go on.
    let new = rebuilt(&original, "reload");
    let new_sha = hex::encode(Sha256::digest(&new));
    for step in 1..=(N / 4) {
        scale(&client, ns, "reload", step * 4).await;
        if step == 2 {
            install_kwok(&c, release, &new, json!({"RELOADED": "yes"}));
            project_config_maps(&client, release, &chart.plugins, 2).await;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    wait_for("the new plugin loaded", Duration::from_secs(30), || async {
        let log = controller.log();
        let swapped = log
            .lines()
            .any(|l| l.contains("plugin loaded") && l.contains(&new_sha));
        if swapped {
            Ok(())
        } else {
            Err("old plugin still in service".into())
        }
    })
    .await;
    let yaml = std::fs::read_to_string(chart.plugins.join("kwok.yaml")).expect("config");
    assert!(
        yaml.contains("RELOADED"),
        "the mount shows the new configuration"
    );
    wait_for("all pods running", Duration::from_secs(180), || {
        pods_running(&client, ns, "reload", N as usize)
    })
    .await;
    wait_for("NodeClaims Ready", Duration::from_secs(30), || {
        claims_ready(&client, pool)
    })
    .await;

    let claims = claims_of(&client, pool).await;
    let nodes = kwok_nodes(&client, pool).await;
    let claim_ids: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| c.provider_id().map(str::to_string))
        .collect();
    let node_ids: BTreeSet<String> = nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
        .collect();
    assert_eq!(claims.len(), N as usize, "one NodeClaim per pod");
    assert_eq!(claim_ids, node_ids, "every NodeClaim has its instance");
    assert_eq!(
        controller
            .metric("karpenter_nodeclaims_created_total")
            .await,
        f64::from(N),
        "no NodeClaim was dropped and made again"
    );
    let log = controller.log();
    // Launches on both sides of the swap: the plugin changed under load.
    let lines: Vec<&str> = log.lines().collect();
    let swap = lines
        .iter()
        .position(|l| l.contains("plugin loaded") && l.contains(&new_sha))
        .expect("the reload is logged");
    let launched = |part: &[&str]| -> BTreeSet<String> {
        part.iter()
            .filter(|l| l.contains("\"message\":\"launched\""))
            .filter_map(|l| {
                Some(
                    serde_json::from_str::<Value>(l).ok()?["fields"]["nodeclaim"]
                        .as_str()?
                        .to_string(),
                )
            })
            .collect()
    };
    let (before, after) = (launched(&lines[..swap]), launched(&lines[swap..]));
    eprintln!(
        "{} NodeClaims launched before the swap, {} after",
        before.len(),
        after.difference(&before).count()
    );
    assert!(!before.is_empty() && after.difference(&before).count() > 0);
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"ERROR\"") || l.contains("launch failed"))
        .collect();
    assert!(
        failed.is_empty(),
        "errors around the swap:\n{}",
        failed.join("\n")
    );
    assert_never_forbidden(controller);
    clean_up(&client, ns, pool).await;
    helm(&c, &["uninstall", release, "--namespace", release]);
    kubectl(&c, &["delete", "namespace", release, "--wait=false"]);
}
