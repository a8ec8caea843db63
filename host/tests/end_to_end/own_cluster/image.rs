//! The controller as users run it: the image from `tests/image/build`
//! imported into the real node's containerd (`tests/cluster/up NAME --node`),
//! the chart installed with the seed's values file (only the endpoint and
//! image changed, plus the kwok plugin as the cloud), and the controller's
//! pods run by a real kubelet: inflate, a plugin swapped through the
//! projected ConfigMap, leader failover, the PodDisruptionBudget under
//! `kubectl drain`, the metrics Service and the pod's confinement as the
//! kernel reports it.
//!
//! Needs `KARPENTER_TEST_IMAGE` (the archive `tests/image/build` prints);
//! `.ci/run` builds it.

use crate::chart::{base64, chart, helm, kubectl_ok, seed_values};
use crate::common;
use common::cluster::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RELEASE: &str = "karpenter";
/// The chart's leader Lease, in the release's namespace.
const LEASE: &str = "karpenter-leader-election";
const NS: &str = "karpenter";
const REPOSITORY: &str = "localhost/karpenter-wasm/karpenter";
/// The `kubernetes` Service, which kube-proxy sends to the API server.
const IN_CLUSTER_ENDPOINT: &str = "https://10.0.0.1:443";

/// The cluster's env file, for what `up --node` adds to it.
fn cluster_vars(c: &Cluster) -> BTreeMap<String, String> {
    let root = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let file = format!("{root}/karpenter-clusters/{}/env", c.name);
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The image archive's config and files, and its size.
struct Image {
    config: Value,
    files: Vec<String>,
    passwd: String,
    bytes: u64,
    tag: String,
}

fn read_image(archive: &Path) -> Image {
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_str().expect("path");
    run("tar", &["-xf", archive.to_str().expect("path"), "-C", d]);
    let blob = |digest: &str| -> PathBuf {
        let (alg, hex) = digest.split_once(':').expect("digest");
        dir.path().join("blobs").join(alg).join(hex)
    };
    let json_of = |p: PathBuf| -> Value {
        serde_json::from_slice(&std::fs::read(&p).expect("blob")).expect("JSON")
    };
    let index = json_of(dir.path().join("index.json"));
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "one image in the archive");
    let tag = manifests[0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("a tag")
        .to_string();
    let manifest = json_of(blob(manifests[0]["digest"].as_str().expect("digest")));
    let config = json_of(blob(manifest["config"]["digest"].as_str().expect("config")));
    let mut files = Vec::new();
    let mut passwd = String::new();
    let mut bytes = manifest["config"]["size"].as_u64().expect("size");
    for layer in manifest["layers"].as_array().expect("layers") {
        bytes += layer["size"].as_u64().expect("size");
        let path = blob(layer["digest"].as_str().expect("digest"));
        let p = path.to_str().expect("path");
        files.extend(
            run("tar", &["-tzf", p])
                .lines()
                .map(|l| format!("/{}", l.trim_start_matches("./").trim_end_matches('/'))),
        );
        let out = Command::new("tar")
            .args(["-xzOf", p, "etc/passwd"])
            .output()
            .expect("tar");
        if out.status.success() {
            passwd = String::from_utf8_lossy(&out.stdout).into_owned();
        }
    }
    Image {
        config,
        files,
        passwd,
        bytes,
        tag,
    }
}

/// The Dockerfile's final stage: what users build is what this test runs.
fn assert_same_as_the_dockerfile(image: &Image) {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    let line = |prefix: &str| -> String {
        dockerfile
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("the Dockerfile has {prefix}"))
            .trim()
            .to_string()
    };
    let exec_form = |s: String| -> Value { serde_json::from_str(&s).expect("exec form") };
    let config = &image.config["config"];
    assert_eq!(config["User"], line("USER "), "user");
    assert_eq!(
        config["Entrypoint"],
        exec_form(line("ENTRYPOINT ")),
        "entrypoint"
    );
    assert_eq!(config["Cmd"], exec_form(line("CMD ")), "command");
    let target = line("ARG TARGET=");
    let arch = match target.split('-').next() {
        Some("x86_64") => "amd64",
        Some("aarch64") => "arm64",
        other => panic!("architecture of {other:?}"),
    };
    assert_eq!(image.config["architecture"], arch, "architecture");
    assert_eq!(image.config["os"], "linux");
    assert!(
        target.ends_with("-musl"),
        "a static binary, as on distroless/static"
    );
    // The binary the Dockerfile copies, and what distroless/static:nonroot
    // gives it: CA certificates, the nonroot user, /tmp.
    let copied = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY --from=build "))
        .map(|l| {
            l.split_whitespace()
                .last()
                .expect("destination")
                .to_string()
        });
    for file in copied.chain(
        ["/etc/ssl/certs/ca-certificates.crt", "/etc/passwd", "/tmp"]
            .into_iter()
            .map(String::from),
    ) {
        assert!(image.files.contains(&file), "{file} in the image");
    }
    let uid = line("USER ").split(':').next().expect("uid").to_string();
    assert!(
        image
            .passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(uid.as_str())),
        "user {uid} in /etc/passwd: {}",
        image.passwd
    );
}

/// The seed's values, the endpoint and image changed; the kwok plugin (whose
/// cloud is the API server) added with the token it calls that cloud with.
/// One real node: the chart's required one-replica-per-node anti-affinity
/// would leave a second replica, or a rolling update's new pod, Pending, so
/// only its node affinity (never on a node it manages) is kept.
fn values(tag: &str, kwok: &[u8], settings: Value, extra: Value) -> tempfile::NamedTempFile {
    let mut v = json!({
        "settings": {"clusterEndpoint": IN_CLUSTER_ENDPOINT},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}
            ]}]
        }}},
        "controller": {
            "image": {"repository": REPOSITORY, "tag": tag, "pullPolicy": "Never"},
            "extraSecrets": [{"name": "kwok-kube", "keys": ["token"]}],
        },
        "plugins": {"extra": {"kwok": {
            // Compressed: a ConfigMap holds 1 MiB.
            "wasmBase64": base64(&zstd::encode_all(kwok, 19).expect("zstd")),
            "zstd": true,
            "nodeClasses": [{"group": "karpenter.kwok.sh", "resource": "kwoknodeclasses"}],
            "allowedHosts": [IN_CLUSTER_ENDPOINT],
            "secrets": ["kwok-kube/token"],
            "settings": settings,
        }}},
    });
    merge(&mut v, extra);
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(file.path(), v.to_string()).expect("write");
    file
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn install(c: &Cluster, values: &Path) {
    let seed = seed_values();
    helm(
        c,
        &[
            "upgrade",
            "--install",
            RELEASE,
            chart().to_str().expect("path"),
            "--namespace",
            NS,
            "--create-namespace",
            "--values",
            seed.to_str().expect("path"),
            "--values",
            values.to_str().expect("path"),
            "--wait=false",
        ],
    );
}

async fn controller_pods(client: &Client) -> Vec<Pod> {
    let mut pods = Api::<Pod>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=karpenter"))
        .await
        .expect("list pods")
        .items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods.sort_by_key(|p| p.name_any());
    pods
}

fn ready_since(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

async fn wait_ready(client: &Client, want: usize) -> Vec<Pod> {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let pods = controller_pods(client).await;
        let ready = pods.iter().filter(|p| ready_since(p).is_some()).count();
        if ready == want && pods.len() == want {
            return pods;
        }
        assert!(
            Instant::now() < deadline,
            "{want} controller pods Ready: timed out with {ready} Ready of {}",
            pods.len()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

fn logs(c: &Cluster, pod: &str) -> String {
    kubectl(c, &["-n", NS, "logs", pod, "-c", "controller"])
}

fn assert_no_permission_errors(c: &Cluster, pod: &str) {
    let log = logs(c, pod);
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("permission denied")
                || l.contains("read-only file system")
                || l.contains("operation not permitted")
                || (l.contains("forbidden") && l.contains("system:serviceaccount"))
        })
        .collect();
    assert!(bad.is_empty(), "{pod}:\n{}", bad.join("\n"));
}

/// The container's main process as the kernel sees it: its uid, effective
/// capabilities and whether its root is mounted read-only.
fn confinement(pod: &Pod) -> (String, String, bool) {
    let id = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.container_id.clone())
        .expect("a container id");
    let id = id.trim_start_matches("containerd://");
    let uid = pod.metadata.uid.as_deref().expect("uid");
    // cgroupfs: <root>/kubepods/<qos>/pod<uid>/<container id> in each hierarchy.
    let cgroup = ["burstable", "besteffort", ""]
        .iter()
        .map(|qos| {
            PathBuf::from("/sys/fs/cgroup/pids/karpenter-test/kubepods")
                .join(qos)
                .join(format!("pod{uid}"))
                .join(id)
        })
        .find(|p| p.exists())
        .expect("the container's cgroup");
    let procs = std::fs::read_to_string(cgroup.join("cgroup.procs")).expect("cgroup.procs");
    let pid = procs.lines().next().expect("a process").trim().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .expect("field")
            .split_whitespace()
            .next()
            .expect("value")
            .to_string()
    };
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root_ro = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|o| o == "ro"))
    });
    (field("Uid:"), field("CapEff:"), root_ro)
}

async fn http_get(url: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// The controller container's memory as the kubelet reports it (cAdvisor
/// on the pod's cgroup): working set and RSS, in bytes.
fn kubelet_memory(c: &Cluster, node: &str, pod: &str) -> (u64, u64) {
    let summary: Value = serde_json::from_str(&kubectl(
        c,
        &[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
        ],
    ))
    .expect("summary");
    let entry = summary["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .find(|p| p["podRef"]["name"] == pod)
        .unwrap_or_else(|| panic!("{pod} in the kubelet's summary"));
    let memory = &entry["containers"][0]["memory"];
    (
        memory["workingSetBytes"].as_u64().unwrap_or(0),
        memory["rssBytes"].as_u64().unwrap_or(0),
    )
}

#[tokio::test]
#[ignore = "needs a cluster with a node (tests/cluster/up NAME --node) and KARPENTER_TEST_IMAGE"]
async fn the_chart_runs_from_the_image_on_a_real_kubelet() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    let vars = cluster_vars(&c);
    let node = vars
        .get("CLUSTER_NODE_NAME")
        .expect("a cluster from `tests/cluster/up NAME --node`")
        .clone();
    let socket = &vars["CLUSTER_CONTAINERD_SOCKET"];
    let archive = PathBuf::from(
        std::env::var("KARPENTER_TEST_IMAGE")
            .expect("KARPENTER_TEST_IMAGE: the archive tests/image/build prints"),
    );

    // The image: what the Dockerfile builds, imported as a registry pull would.
    let image = read_image(&archive);
    assert_same_as_the_dockerfile(&image);
    eprintln!(
        "image {REPOSITORY}:{}: {:.1} MiB compressed",
        image.tag,
        image.bytes as f64 / 1048576.0
    );
    run(
        "ctr",
        &[
            "--address",
            socket,
            "--namespace",
            "k8s.io",
            "images",
            "import",
            "--base-name",
            REPOSITORY,
            archive.to_str().expect("path"),
        ],
    );

    // The chart, with the seed's values.
    let _ = kubectl_ok(&c, &["delete", "namespace", NS, "--wait=true"]);
    kubectl(&c, &["create", "namespace", NS]);
    kubectl(
        &c,
        &[
            "-n",
            NS,
            "create",
            "secret",
            "generic",
            "kwok-kube",
            "--from-literal",
            &format!("token={}", c.token),
        ],
    );
    let kwok = common::plugin_wasm("kwok");
    let first = values(
        &image.tag,
        &kwok,
        json!({"TOKEN_SECRET": "kwok-kube/token"}),
        json!({}),
    );
    install(&c, first.path());
    install_plugin_crds(&c, "kwok", &["kwoknodeclasses.karpenter.kwok.sh"]);

    let pods = wait_ready(&client, 1).await;
    let pod = &pods[0];
    let name = pod.name_any();
    let created = pod.metadata.creation_timestamp.as_ref().expect("created").0;
    let ready = ready_since(pod).expect("ready");
    eprintln!(
        "pod created to Ready: {:.1} s (cold: empty precompiled cache, plugins compiled in the pod)",
        (ready.as_millisecond() - created.as_millisecond()) as f64 / 1000.0
    );
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str()),
        "on the real node"
    );

    // The bundled providers come from the image's binary: the chart's
    // ConfigMaps carry only their configuration.
    let log = logs(&c, &name);
    for (plugin, wasm) in karpenter_plugin_bundle::PROVIDERS {
        if plugin == "kwok" {
            continue;
        }
        let sha = hex::encode(Sha256::digest(wasm));
        assert!(
            log.lines()
                .any(|l| l.contains("plugin loaded") && l.contains(plugin) && l.contains(&sha)),
            "{plugin} loaded from the binary:\n{log}"
        );
    }

    // Confinement, from /proc of the container's process.
    let (uid, caps, root_ro) = confinement(pod);
    assert_eq!(uid, "65532", "runs as the nonroot user");
    assert_eq!(caps, "0000000000000000", "no capabilities");
    assert!(root_ro, "read-only root filesystem");

    // /metrics, /healthz and /readyz through the Service (kube-proxy).
    let svc = Api::<Service>::namespaced(client.clone(), NS)
        .get(RELEASE)
        .await
        .expect("the metrics Service");
    let ip = svc.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
    for path in ["/healthz", "/readyz"] {
        let (status, _) = http_get(&format!("http://{ip}:8080{path}")).await;
        assert_eq!(status, 200, "{path}");
    }

    // Inflate: 5 one-CPU pods from 0 on kwok nodes.
    let (ns, pool) = ("e2e-image", "image");
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "inflate", pool, 0, "1", false));
    scale(&client, ns, "inflate", 5).await;
    wait_for("5 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 5)
    })
    .await;
    wait_for("NodeClaims Ready", Duration::from_secs(60), || {
        claims_ready(&client, pool)
    })
    .await;
    let (status, metrics) = http_get(&format!("http://{ip}:8080/metrics")).await;
    assert_eq!(status, 200);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("karpenter_nodeclaims_created_total") && !l.ends_with(" 0")),
        "launches counted"
    );

    // Memory at rest, from the kubelet.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (working_set, rss) = kubelet_memory(&c, &node, &name);
    eprintln!(
        "controller pod memory at rest (kubelet): working set {:.1} MiB, RSS {:.1} MiB",
        working_set as f64 / 1048576.0,
        rss as f64 / 1048576.0
    );
    assert!(working_set > 0);

    // A changed plugin through `helm upgrade`: the kubelet updates the
    // projected ConfigMap and the running pod swaps it in.
    let swapped = rebuilt(&kwok, "image-swap");
    let swapped_sha = hex::encode(Sha256::digest(&swapped));
    let second = values(
        &image.tag,
        &swapped,
        json!({"TOKEN_SECRET": "kwok-kube/token", "SWAPPED": "yes"}),
        json!({}),
    );
    let upgraded = Instant::now();
    install(&c, second.path());
    wait_for_every(
        "the new plugin answering",
        Duration::from_secs(180),
        Duration::from_secs(1),
        || async {
            let log = logs(&c, &name);
            if log
                .lines()
                .any(|l| l.contains("plugin loaded") && l.contains(&swapped_sha))
            {
                Ok(())
            } else {
                Err("old plugin".into())
            }
        },
    )
    .await;
    eprintln!(
        "plugin swap through the ConfigMap: {:.1} s from helm upgrade to the new plugin loaded",
        upgraded.elapsed().as_secs_f64()
    );
    scale(&client, ns, "inflate", 6).await;
    wait_for("6 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 6)
    })
    .await;
    let pods = controller_pods(&client).await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].name_any(), name, "the same pod");
    assert_eq!(restarts(&pods[0]), 0, "no restart");
    assert_no_permission_errors(&c, &name);

    // Two replicas: deleting the leader hands the Lease over.
    let two = values(
        &image.tag,
        &swapped,
        json!({"TOKEN_SECRET": "kwok-kube/token", "SWAPPED": "yes"}),
        json!({"replicas": 2}),
    );
    install(&c, two.path());
    let pods = wait_ready(&client, 2).await;
    let leader = lease_holder_in(&client, NS, LEASE).await.expect("a leader");
    assert!(pods.iter().any(|p| p.name_any() == leader), "{leader}");
    let deleted = Instant::now();
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&leader, &DeleteParams::default())
        .await
        .expect("delete the leader");
    wait_for("another leader", Duration::from_secs(60), || async {
        match lease_holder_in(&client, NS, LEASE).await {
            Some(h) if h != leader && !h.is_empty() => Ok(()),
            other => Err(format!("held by {other:?}")),
        }
    })
    .await;
    eprintln!(
        "leader failover: {:.1} s from deleting the leader pod to the Lease held by the other",
        deleted.elapsed().as_secs_f64()
    );
    // Pods only a new NodePool's nodes take: the new leader must launch.
    let after = "image-after";
    apply(&c, node_pool(after, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "after", after, 2, "1", false));
    wait_for(
        "2 pods running on new nodes",
        Duration::from_secs(120),
        || pods_running(&client, ns, "after", 2),
    )
    .await;
    eprintln!(
        "new leader provisioned: pods on new NodeClaims running {:.1} s after the leader pod was deleted",
        deleted.elapsed().as_secs_f64()
    );

    // The PodDisruptionBudget during a drain of the real node: one replica stays.
    wait_ready(&client, 2).await;
    let out = Command::new(&c.kubectl)
        .args([
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=30s",
        ])
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("kubectl drain");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the drain cannot finish: {said}");
    assert!(said.contains("disruption budget"), "{said}");
    let left = controller_pods(&client).await;
    let running: Vec<&Pod> = left
        .iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                && ready_since(p).is_some()
        })
        .collect();
    assert_eq!(running.len(), 1, "one replica kept on the drained node");
    kubectl(&c, &["uncordon", &node]);
    wait_ready(&client, 2).await;

    // Clean up while a controller runs: its finalizers delete the instances.
    clean_up(&client, ns, pool).await;
    clean_up(&client, ns, after).await;
    for pod in controller_pods(&client).await {
        assert_no_permission_errors(&c, &pod.name_any());
    }
    helm(&c, &["uninstall", RELEASE, "--namespace", NS]);
    kubectl(&c, &["delete", "namespace", NS, "--wait=false"]);
}
