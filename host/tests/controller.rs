//! End-to-end: `karpenter controller` with the kwok plugin against a real
//! API server, scheduler, controller-manager and kwok. Needs a cluster from
//! `tests/cluster/up NAME` and `KARPENTER_TEST_CLUSTER=NAME`; `.ci/run` does
//! both. The scenarios share one cluster, so they run one at a time.

mod common;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter::crds::{NodeClaim, NodePool};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// One scenario at a time: each runs its own controller over the whole cluster.
static SERIAL: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

struct Cluster {
    endpoint: String,
    ca_file: String,
    token: String,
    kubeconfig: String,
}

fn cluster() -> Cluster {
    let name = std::env::var("KARPENTER_TEST_CLUSTER")
        .expect("set KARPENTER_TEST_CLUSTER to a cluster from tests/cluster/up");
    let root = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let env_file = format!("{root}/karpenter-clusters/{name}/env");
    let text = std::fs::read_to_string(&env_file).unwrap_or_else(|e| panic!("{env_file}: {e}"));
    let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let token_file = vars["CLUSTER_TOKEN_FILE"];
    Cluster {
        endpoint: vars["CLUSTER_ENDPOINT"].to_string(),
        ca_file: vars["CLUSTER_CA_FILE"].to_string(),
        token: std::fs::read_to_string(token_file)
            .expect("token")
            .trim()
            .to_string(),
        kubeconfig: vars["KUBECONFIG"].to_string(),
    }
}

async fn client(c: &Cluster) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&c.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A `karpenter controller` process with its own plugin and secrets
/// directories; killed when dropped.
struct Controller {
    child: Child,
    metrics: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Controller {
    fn start(c: &Cluster, settings: &[(&str, &str)], extra: &[&str]) -> Controller {
        let dir = tempfile::tempdir().expect("tempdir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).expect("mkdir");
        std::fs::write(plugins.join("kwok.wasm"), common::plugin_wasm("kwok")).expect("wasm");
        let config = json!({
            "allowedHosts": [c.endpoint],
            "secrets": ["kube/token"],
            "settings": settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
        });
        std::fs::write(plugins.join("kwok.yaml"), config.to_string()).expect("config");
        let secrets = dir.path().join("secrets");
        std::fs::create_dir_all(secrets.join("kube")).expect("mkdir");
        std::fs::write(secrets.join("kube/token"), &c.token).expect("token");
        let metrics = free_port();
        let log = dir.path().join("controller.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args([
                "--log-level",
                "info,karpenter=debug",
                "--log-format",
                "json",
                "controller",
            ])
            .arg("--plugin-dir")
            .arg(&plugins)
            .arg("--secrets-dir")
            .arg(&secrets)
            .arg("--precompiled-dir")
            .arg(precompiled_dir())
            .args(["--cluster-name", "e2e", "--cluster-endpoint", &c.endpoint])
            .args(["--cluster-ca-file", &c.ca_file])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
            .args(["--gc-interval", "5s"])
            .args(extra)
            .env("KUBECONFIG", &c.kubeconfig)
            .env_remove("POD_NAME")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start the controller");
        Controller {
            child,
            metrics,
            log,
            _dir: dir,
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// One metric's value (summed over its label sets), 0 when absent.
    async fn metric(&self, name: &str) -> f64 {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics);
        let Ok(r) = reqwest::get(&url).await else {
            return 0.0;
        };
        let text = r.text().await.unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn precompiled_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("karpenter-e2e-precompiled");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

fn kubectl(c: &Cluster, args: &[&str]) -> String {
    let bin = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let out = Command::new(bin)
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("kubectl runs (put the cluster's bin directory on PATH or set KUBECTL)");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CRDs from the chart and the kwok plugin's NodeClass CRD from its schema.
fn install_crds(c: &Cluster) {
    let crds = repo().join("charts/karpenter/crds");
    kubectl(
        c,
        &["apply", "--server-side", "-f", crds.to_str().expect("path")],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["plugin", "crd"])
        .arg(repo().join("target/plugins/kwok.wasm"))
        .output()
        .expect("karpenter plugin crd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::env::temp_dir().join(format!("kwok-crd-{}.yaml", std::process::id()));
    std::fs::write(&file, &out.stdout).expect("write");
    kubectl(
        c,
        &["apply", "--server-side", "-f", file.to_str().expect("path")],
    );
    for crd in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh",
    ] {
        kubectl(
            c,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=30s",
                &format!("crd/{crd}"),
            ],
        );
    }
}

async fn apply(client: &Client, c: &Cluster, manifest: serde_json::Value) {
    let _ = client;
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(file.path(), manifest.to_string()).expect("write");
    kubectl(
        c,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            file.path().to_str().expect("path"),
        ],
    );
}

fn node_class() -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {}
    })
}

fn node_pool(name: &str, requirements: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"e2e": name}},
                "spec": {
                    "requirements": requirements,
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "expireAfter": "720h"
                }
            },
            "limits": {"cpu": "1000"},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"}
        }
    })
}

fn deployment(
    ns: &str,
    name: &str,
    pool: &str,
    replicas: i32,
    cpu: &str,
    spread: bool,
) -> serde_json::Value {
    let mut spec = json!({
        "nodeSelector": {"e2e": pool},
        "tolerations": [{"operator": "Exists", "key": "kwok.x-k8s.io/node"}],
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "inflate", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}]
    });
    if spread {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}
        ]}});
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}
        }
    })
}

async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("{what}: timed out: {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn pods_running(client: &Client, ns: &str, app: &str, want: usize) -> Result<(), String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map_err(|e| e.to_string())?;
    let running = pods
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    if running == want {
        Ok(())
    } else {
        Err(format!("{running}/{want} running"))
    }
}

async fn claims_of(client: &Client, pool: &str) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(client.clone())
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .expect("list nodeclaims")
        .items
}

async fn kwok_nodes(client: &Client, pool: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .expect("list nodes")
        .items
}

/// Removes a scenario's objects; the controller must still run, since its
/// finalizers delete the instances.
async fn clean_up(client: &Client, ns: &str, pool: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await;
    let _ = Api::<NodePool>::all(client.clone())
        .delete(pool, &DeleteParams::default())
        .await;
    let _ = Api::<NodeClaim>::all(client.clone())
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")),
        )
        .await;
    wait_for("instances deleted", Duration::from_secs(90), || async {
        let claims = claims_of(client, pool).await.len();
        let nodes = kwok_nodes(client, pool).await.len();
        if claims == 0 && nodes == 0 {
            Ok(())
        } else {
            Err(format!("{claims} NodeClaims, {nodes} Nodes left"))
        }
    })
    .await;
}

fn requirements_on_demand_amd64() -> serde_json::Value {
    json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ])
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn inflate_five_pods_get_nodes_that_become_ready() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-inflate", "inflate");
    namespace(&client, ns).await;
    apply(&client, &c, node_class()).await;
    apply(&client, &c, node_pool(pool, requirements_on_demand_amd64())).await;
    apply(&client, &c, deployment(ns, "inflate", pool, 0, "1", false)).await;
    let controller = Controller::start(&c, &[], &["--disable-leader-election"]);

    let scaled = Instant::now();
    scale(&client, ns, "inflate", 5).await;
    wait_for("5 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 5)
    })
    .await;
    eprintln!(
        "5 pods running {:.1}s after scaling",
        scaled.elapsed().as_secs_f64()
    );

    let claims = claims_of(&client, pool).await;
    assert!(!claims.is_empty(), "NodeClaims were created");
    let table = kubectl(
        &c,
        &[
            "get",
            "nodeclaims",
            "-l",
            &format!("karpenter.sh/nodepool={pool}"),
        ],
    );
    eprintln!("{table}");
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    );
    for line in lines {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 7, "every column filled: {line}");
        assert_eq!(cols[2], "on-demand");
        assert!(cols[3].starts_with("test-zone-"), "{line}");
        assert_eq!(cols[5], "True", "{line}");
    }
    for claim in &claims {
        assert!(
            claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "NodePool" && o.name == pool)
        );
        for t in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(claim.is_true(t), "{} {t}", claim.name_any());
        }
    }
    let nodes = kwok_nodes(&client, pool).await;
    assert_eq!(nodes.len(), claims.len(), "one Node per NodeClaim");
    for n in &nodes {
        let labels = n.labels();
        assert_eq!(
            labels.get("karpenter.sh/initialized").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get("karpenter.sh/registered").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get("e2e").map(String::as_str),
            Some(pool),
            "template labels synced"
        );
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
            "unregistered taint removed"
        );
        assert!(
            n.finalizers()
                .iter()
                .any(|f| f == "karpenter.sh/termination")
        );
    }
    let events = kubectl(
        &c,
        &[
            "get",
            "events",
            "-A",
            "-o",
            "custom-columns=REASON:.reason,NOTE:.note,MESSAGE:.message",
        ],
    );
    for reason in [
        "Nominated",
        "Launched",
        "Registered",
        "Initialized",
        "Ready",
    ] {
        assert!(
            events.lines().any(|l| l.starts_with(reason)),
            "a {reason} event:\n{events}"
        );
    }
    assert!(
        controller
            .metric("karpenter_nodeclaims_created_total")
            .await
            >= 1.0
    );
    assert!(
        controller
            .metric("karpenter_nodeclaims_registered_total")
            .await
            >= 1.0
    );
    assert!(
        controller
            .metric("karpenter_pods_startup_duration_seconds_count")
            .await
            >= 5.0
    );
    let status = Api::<NodePool>::all(client.clone())
        .get_status(pool)
        .await
        .expect("status");
    let status = status.status.expect("nodepool status written");
    assert_eq!(status.nodes, Some(claims.len() as i64));
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{status:?}"
    );

    clean_up(&client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn insufficient_capacity_moves_to_the_next_offering() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-ice", "ice");
    namespace(&client, ns).await;
    apply(&client, &c, node_class()).await;
    let mut reqs = requirements_on_demand_amd64();
    reqs.as_array_mut().expect("array").extend([
        json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-2x-amd64-linux"]}),
        json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a", "test-zone-b"]}),
    ]);
    apply(&client, &c, node_pool(pool, reqs)).await;
    apply(&client, &c, deployment(ns, "ice", pool, 0, "1", false)).await;
    let controller = Controller::start(
        &c,
        &[("OUT_OF_CAPACITY", "c-2x-amd64-linux/test-zone-a/on-demand")],
        &["--disable-leader-election"],
    );
    scale(&client, ns, "ice", 1).await;
    wait_for("the pod runs", Duration::from_secs(120), || {
        pods_running(&client, ns, "ice", 1)
    })
    .await;
    let nodes = kwok_nodes(&client, pool).await;
    assert_eq!(nodes.len(), 1);
    assert_eq!(
        nodes[0]
            .labels()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("test-zone-b"),
        "launched in the zone that had capacity"
    );
    assert!(
        controller.log().contains("insufficient capacity"),
        "the first launch failed on zone a:\n{}",
        controller.log()
    );
    clean_up(&client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn killed_mid_launch_neither_leaks_nor_duplicates() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-crash", "crash");
    const N: usize = 50;
    namespace(&client, ns).await;
    apply(&client, &c, node_class()).await;
    apply(&client, &c, node_pool(pool, requirements_on_demand_amd64())).await;
    // Hostname anti-affinity: one node per pod, so N NodeClaims.
    apply(&client, &c, deployment(ns, "crash", pool, 0, "100m", true)).await;
    let mut first = Controller::start(
        &c,
        &[],
        &["--disable-leader-election", "--batch-idle-duration", "2s"],
    );
    scale(&client, ns, "crash", N as i32).await;
    // Kill it while the launches are under way.
    wait_for("launches under way", Duration::from_secs(60), || async {
        let claims = claims_of(&client, pool).await;
        let launched = claims.iter().filter(|c| c.is_true("Launched")).count();
        if launched >= 1 {
            Ok(())
        } else {
            Err(format!("{} NodeClaims, {launched} launched", claims.len()))
        }
    })
    .await;
    first.kill(); // SIGKILL
    let claims = claims_of(&client, pool).await;
    let launched = claims.iter().filter(|c| c.is_true("Launched")).count();
    eprintln!(
        "killed with {} NodeClaims, {launched} launched",
        claims.len()
    );

    let _second = Controller::start(&c, &[], &["--disable-leader-election"]);
    wait_for("all pods running", Duration::from_secs(180), || {
        pods_running(&client, ns, "crash", N)
    })
    .await;
    // Give garbage collection a pass to find any leak.
    tokio::time::sleep(Duration::from_secs(8)).await;
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
    assert_eq!(claims.len(), N, "one NodeClaim per pod, none duplicated");
    assert_eq!(claim_ids.len(), N, "every NodeClaim launched once");
    assert_eq!(
        node_ids, claim_ids,
        "instances equal NodeClaims: none leaked"
    );
    clean_up(&client, ns, pool).await;
}

async fn lease_holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .get_opt("karpenter-e2e-leader")
        .await
        .ok()??
        .spec?
        .holder_identity
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn only_the_leader_acts_and_a_standby_takes_over() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-leader", "leader");
    namespace(&client, ns).await;
    apply(&client, &c, node_class()).await;
    apply(&client, &c, node_pool(pool, requirements_on_demand_amd64())).await;
    apply(&client, &c, deployment(ns, "leader", pool, 0, "1", false)).await;
    let _ = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .delete("karpenter-e2e-leader", &DeleteParams::default())
        .await;
    let lease = [
        "--leader-election-name",
        "karpenter-e2e-leader",
        "--leader-lease-duration",
        "6s",
        "--leader-renew-deadline",
        "4s",
        "--leader-retry-period",
        "1s",
    ];
    let mut a = Controller::start(
        &c,
        &[],
        &[&lease[..], &["--identity", "replica-a"]].concat(),
    );
    let mut b = Controller::start(
        &c,
        &[],
        &[&lease[..], &["--identity", "replica-b"]].concat(),
    );
    wait_for("a leader", Duration::from_secs(60), || async {
        lease_holder(&client)
            .await
            .map(|_| ())
            .ok_or_else(|| "no holder".to_string())
    })
    .await;
    let holder = lease_holder(&client).await.expect("holder");
    let (leader, standby) = if holder == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    scale(&client, ns, "leader", 2).await;
    wait_for("2 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "leader", 2)
    })
    .await;
    assert!(leader.metric("karpenter_nodeclaims_created_total").await >= 1.0);
    assert_eq!(leader.metric("karpenter_leader").await, 1.0);
    assert_eq!(
        standby.metric("karpenter_nodeclaims_created_total").await,
        0.0,
        "the standby created nothing"
    );
    assert_eq!(standby.metric("karpenter_leader").await, 0.0);

    let killed = Instant::now();
    leader.kill();
    let new_holder = if holder == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    wait_for(
        "the standby takes the lease",
        Duration::from_secs(30),
        || async {
            match lease_holder(&client).await {
                Some(h) if h == new_holder => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    )
    .await;
    let handover = killed.elapsed();
    eprintln!(
        "handover took {:.1}s (lease duration 6s)",
        handover.as_secs_f64()
    );
    assert!(
        handover <= Duration::from_secs(8),
        "within the lease duration plus two retries: {handover:?}"
    );

    scale(&client, ns, "leader", 4).await;
    wait_for("4 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "leader", 4)
    })
    .await;
    assert!(
        standby.metric("karpenter_nodeclaims_created_total").await >= 1.0,
        "the new leader provisions"
    );
    clean_up(&client, ns, pool).await;
}
