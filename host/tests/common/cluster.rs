//! The end-to-end harness: a cluster from `tests/cluster/up`, a
//! `karpenter controller` process with the kwok plugin, and the objects and
//! waits the scenarios share.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_controller::crds::{NodeClaim, NodePool};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every controller acts on every NodePool in the cluster, so the tests
/// that run one take turns: two tests' controllers would launch for each
/// other's pods. Every end-to-end case takes it first.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Clone)]
pub struct Cluster {
    /// Its name for tests/cluster/{up,restart,down}.
    pub name: String,
    pub endpoint: String,
    pub ca_file: String,
    pub token: String,
    pub kubeconfig: String,
    pub kubectl: String,
}

pub fn cluster() -> Cluster {
    let name = std::env::var("KARPENTER_TEST_CLUSTER")
        .expect("set KARPENTER_TEST_CLUSTER to a cluster from tests/cluster/up");
    let root = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let env_file = format!("{root}/karpenter-clusters/{name}/env");
    let text = std::fs::read_to_string(&env_file).unwrap_or_else(|e| panic!("{env_file}: {e}"));
    let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let token_file = vars["CLUSTER_TOKEN_FILE"];
    Cluster {
        name: name.clone(),
        endpoint: vars["CLUSTER_ENDPOINT"].to_string(),
        ca_file: vars["CLUSTER_CA_FILE"].to_string(),
        token: std::fs::read_to_string(token_file)
            .expect("token")
            .trim()
            .to_string(),
        kubeconfig: vars["KUBECONFIG"].to_string(),
        kubectl: format!("{}/kubectl", vars["CLUSTER_BIN_DIR"]),
    }
}

pub async fn client(c: &Cluster) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&c.kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `examples/<cloud>/<name>` of the checkout.
pub fn example(cloud: &str, name: &str) -> String {
    repo()
        .join("examples")
        .join(cloud)
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The same plugin under different bytes: a custom section appended, as a
/// rebuild would change it.
pub fn rebuilt(wasm: &[u8], marker: &str) -> Vec<u8> {
    let name = b"karpenter-test";
    let payload = marker.as_bytes();
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 lengths");
    let mut out = wasm.to_vec();
    out.extend([0u8, size as u8, name.len() as u8]);
    out.extend(name);
    out.extend(payload);
    out
}

/// Who holds the leader Lease `name` in kube-system.
pub async fn lease_holder(client: &Client, name: &str) -> Option<String> {
    lease_holder_in(client, "kube-system", name).await
}

/// Who holds the leader Lease `name` in namespace `ns`.
pub async fn lease_holder_in(client: &Client, ns: &str, name: &str) -> Option<String> {
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??
        .spec?
        .holder_identity
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A `karpenter controller` process with its own plugin and secrets
/// directories; killed when dropped.
pub struct Controller {
    pub child: Child,
    pub metrics: u16,
    log: PathBuf,
    pub dir: tempfile::TempDir,
}

/// One plugin for `Controller::start_plugins`: its wasm, its `<name>.yaml`
/// (as JSON) and the secrets it is granted (`<secret>/<key>`, bytes).
#[derive(Clone)]
pub struct PluginSetup {
    pub name: String,
    pub wasm: Vec<u8>,
    pub config: serde_json::Value,
    pub secrets: Vec<(String, Vec<u8>)>,
}

impl PluginSetup {
    /// The kwok plugin, reaching the cluster with its token.
    pub fn kwok(c: &Cluster, settings: &[(&str, &str)]) -> PluginSetup {
        PluginSetup {
            name: "kwok".into(),
            wasm: super::plugin_wasm("kwok"),
            config: json!({
                "allowedHosts": [c.endpoint],
                "secrets": ["kube/token"],
                "settings": settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            }),
            secrets: vec![("kube/token".into(), c.token.clone().into_bytes())],
        }
    }
}

/// The controller's command: `KARPENTER_TEST_CONTROLLER_BINARY` if set (say
/// the image's `dist` build), under `KARPENTER_TEST_CONTROLLER_WRAPPER` if set
/// (say `heaptrack`, with a build without mimalloc).
fn wrapped(binary: &str) -> Command {
    let chosen = std::env::var("KARPENTER_TEST_CONTROLLER_BINARY").ok();
    let binary = chosen.as_deref().unwrap_or(binary);
    let wrapper = std::env::var("KARPENTER_TEST_CONTROLLER_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(binary);
            c
        }
        None => Command::new(binary),
    }
}

impl Controller {
    /// The controller with the kwok plugin and these settings.
    pub fn start(c: &Cluster, settings: &[(&str, &str)], extra: &[&str]) -> Controller {
        Controller::start_plugins(c, &[PluginSetup::kwok(c, settings)], extra)
    }

    /// The controller with one plugin (`target/plugins/<plugin>.wasm`) and its
    /// `<plugin>.yaml`, extra environment variables and arguments. The secret
    /// `kube/token` holds the cluster's token.
    pub fn start_with(
        c: &Cluster,
        plugin: &str,
        config: serde_json::Value,
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Controller {
        let setup = PluginSetup {
            name: plugin.into(),
            wasm: super::plugin_wasm(plugin),
            config,
            secrets: vec![("kube/token".into(), c.token.clone().into_bytes())],
        };
        Controller::start_env(c, &[setup], env, extra)
    }

    /// A controller with one plugin, `<name>.wasm` with `config` as its yaml
    /// (JSON is YAML); the token of the cluster is granted as `kube/token`.
    pub fn start_with_plugin(
        c: &Cluster,
        name: &str,
        wasm: &[u8],
        config: &serde_json::Value,
        extra: &[&str],
    ) -> Controller {
        let setup = PluginSetup {
            name: name.into(),
            wasm: wasm.to_vec(),
            config: config.clone(),
            secrets: vec![("kube/token".into(), c.token.clone().into_bytes())],
        };
        Controller::start_env(c, &[setup], &[], extra)
    }

    /// A controller loading exactly these plugins.
    pub fn start_plugins(c: &Cluster, setups: &[PluginSetup], extra: &[&str]) -> Controller {
        Controller::start_env(c, setups, &[], extra)
    }

    /// A controller loading exactly these plugins, with extra environment.
    pub fn start_env(
        c: &Cluster,
        setups: &[PluginSetup],
        env: &[(&str, &str)],
        extra: &[&str],
    ) -> Controller {
        let dir = tempfile::tempdir().expect("tempdir");
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).expect("mkdir");
        let secrets = dir.path().join("secrets");
        for p in setups {
            std::fs::write(plugins.join(format!("{}.wasm", p.name)), &p.wasm).expect("wasm");
            std::fs::write(
                plugins.join(format!("{}.yaml", p.name)),
                p.config.to_string(),
            )
            .expect("config");
            for (name, bytes) in &p.secrets {
                let path = secrets.join(name);
                std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
                std::fs::write(path, bytes).expect("secret");
            }
        }
        std::fs::create_dir_all(&secrets).expect("mkdir");
        let metrics = free_port();
        let log = dir.path().join("controller.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = wrapped(env!("CARGO_BIN_EXE_karpenter"))
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
            // Garbage collection every 5 s, so tests see it act; `extra`
            // comes after, and a flag given twice takes its last value.
            .args(["--gc-interval", "5s"])
            .args(extra)
            .envs(env.iter().copied())
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
            dir,
        }
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// One metric's value (summed over its label sets), 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
        // KARPENTER_E2E_LOG_DIR keeps every controller's log for reading later.
        if let Ok(dir) = std::env::var("KARPENTER_E2E_LOG_DIR") {
            let name = format!("controller-{}-{}.log", std::process::id(), self.child.id());
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, std::path::Path::new(&dir).join(name));
        }
        // A failing scenario shows what the controller was doing.
        if std::thread::panicking() {
            remove_created();
            let log = self.log();
            let lines = std::env::var("KARPENTER_E2E_LOG_LINES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(40);
            let tail: Vec<&str> = log.lines().rev().take(lines).collect();
            eprintln!("--- controller log (last {lines} lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

pub fn precompiled_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("karpenter-e2e-precompiled");
    std::fs::create_dir_all(&dir).expect("mkdir");
    dir
}

pub fn kubectl(c: &Cluster, args: &[&str]) -> String {
    if args.first() == Some(&"apply") {
        for file in args.windows(2).filter(|w| w[0] == "-f").map(|w| w[1]) {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for v in serde_saphyr::from_multiple::<serde_json::Value>(&text).unwrap_or_default() {
                created(&v);
            }
        }
    }
    let out = Command::new(&c.kubectl)
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("the cluster's kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CRDs from the chart and the kwok plugin's NodeClass CRD from its schema.
pub fn install_crds(c: &Cluster) {
    let crds = repo().join("charts/karpenter/crds");
    kubectl(
        c,
        &["apply", "--server-side", "-f", crds.to_str().expect("path")],
    );
    for crd in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "nodeoverlays.karpenter.sh",
        "capacitybuffers.autoscaling.x-k8s.io",
    ] {
        wait_established(c, crd);
    }
    install_plugin_crds(c, "kwok", &["kwoknodeclasses.karpenter.kwok.sh"]);
}

/// The NodeClass CRDs of a built plugin, applied and established.
pub fn install_plugin_crds(c: &Cluster, plugin: &str, crds: &[&str]) {
    install_wasm_crds(c, &super::plugin_path(plugin), crds);
}

/// The NodeClass CRDs a plugin file serves, from `karpenter plugin crd`,
/// applied and established.
pub fn install_wasm_crds(c: &Cluster, wasm: &std::path::Path, crds: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["plugin", "crd"])
        .arg(wasm)
        .output()
        .expect("karpenter plugin crd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(file.path(), &out.stdout).expect("write");
    kubectl(
        c,
        &[
            "apply",
            "--server-side",
            "-f",
            file.path().to_str().expect("path"),
        ],
    );
    for crd in crds {
        wait_established(c, crd);
    }
}

/// `kubectl wait` fails at once, rather than waits, on a CRD so new that
/// its status has no conditions yet; so it is asked again.
fn wait_established(c: &Cluster, crd: &str) {
    let args = [
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        &format!("crd/{crd}"),
    ];
    for _ in 0..20 {
        let out = Command::new(&c.kubectl)
            .args(args)
            .env("KUBECONFIG", &c.kubeconfig)
            .output()
            .expect("the cluster's kubectl runs");
        if out.status.success() {
            return;
        }
        if !String::from_utf8_lossy(&out.stderr).contains(".status.conditions accessor error") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    kubectl(c, &args);
}

thread_local! {
    /// NodePools and namespaces this test thread created, removed when a
    /// controller of the thread is dropped by a failing test: a scenario
    /// that fails leaves nothing for the next controller on the cluster to
    /// act on.
    static CREATED: std::cell::RefCell<Vec<(&'static str, String)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn created(manifest: &serde_json::Value) {
    let kind = match manifest["kind"].as_str() {
        Some("NodePool") => "nodepool",
        Some("Namespace") => "namespace",
        _ => return,
    };
    if let Some(name) = manifest["metadata"]["name"].as_str() {
        CREATED.with(|c| c.borrow_mut().push((kind, name.to_string())));
    }
}

/// Deletes what [`CREATED`] holds, without waiting for finalizers.
fn remove_created() {
    let objects = CREATED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if objects.is_empty() || std::env::var("KARPENTER_TEST_CLUSTER").is_err() {
        return;
    }
    let c = cluster();
    for (kind, name) in objects {
        let _ = Command::new(&c.kubectl)
            .args(["delete", kind, &name, "--ignore-not-found", "--wait=false"])
            .env("KUBECONFIG", &c.kubeconfig)
            .output();
    }
}

pub fn apply(c: &Cluster, manifest: serde_json::Value) {
    created(&manifest);
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

pub fn node_class() -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1",
        "kind": "KWOKNodeClass",
        "metadata": {"name": "default"},
        "spec": {}
    })
}

pub fn node_pool(name: &str, requirements: serde_json::Value) -> serde_json::Value {
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

pub fn deployment(
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

pub async fn namespace(client: &Client, name: &str) {
    created(&json!({"kind": "Namespace", "metadata": {"name": name}}));
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("namespace {name}: {e}"),
    }
}

pub async fn scale(client: &Client, ns: &str, name: &str, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    wait_for_every(what, timeout, Duration::from_millis(250), check).await
}

/// [`wait_for`] for a check that finds something: what it found.
pub async fn wait_for_value<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(why) if Instant::now() > deadline => panic!("{what}: timed out: {why}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// [`wait_for`], looking every `interval`.
pub async fn wait_for_every<F, Fut>(what: &str, timeout: Duration, interval: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("{what}: timed out: {why}"),
            Err(_) => tokio::time::sleep(interval).await,
        }
    }
}

pub async fn pods_running(client: &Client, ns: &str, app: &str, want: usize) -> Result<(), String> {
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

/// Whether the Node's Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Every NodeClaim of the pool Launched, Registered, Initialized and Ready.
/// A pod can run on its node a moment before the NodeClaim's own status
/// write lands, so tests wait for this rather than read it once the pods run.
pub async fn claims_ready(client: &Client, pool: &str) -> Result<(), String> {
    let claims = claims_of(client, pool).await;
    if claims.is_empty() {
        return Err("no NodeClaims".into());
    }
    for c in &claims {
        for t in ["Launched", "Registered", "Initialized", "Ready"] {
            if !c.is_true(t) {
                return Err(format!("{} not {t}", c.name_any()));
            }
        }
    }
    Ok(())
}

pub async fn claims_of(client: &Client, pool: &str) -> Vec<NodeClaim> {
    let api = Api::<NodeClaim>::all(client.clone());
    let params = ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}"));
    // A loaded API server drops a connection now and then.
    for _ in 0..5 {
        match api.list(&params).await {
            Ok(list) => return list.items,
            Err(e) => {
                eprintln!("list nodeclaims: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    panic!("cannot list NodeClaims")
}

pub async fn kwok_nodes(client: &Client, pool: &str) -> Vec<Node> {
    Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}")))
        .await
        .expect("list nodes")
        .items
}

/// Removes a scenario's objects; the controller must still run, since its
/// finalizers delete the instances.
pub async fn clean_up(client: &Client, ns: &str, pool: &str) {
    clean_up_within(client, ns, pool, Duration::from_secs(90)).await;
}

/// [`clean_up`], waiting up to `wait` for the instances to go.
pub async fn clean_up_within(client: &Client, ns: &str, pool: &str, wait: Duration) {
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
    wait_for("instances deleted", wait, || async {
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

/// On-demand amd64 Linux of one kwok instance type, in these zones.
pub fn requirements_one_type(instance_type: &str, zones: &[&str]) -> serde_json::Value {
    let mut reqs = requirements_on_demand_amd64();
    if let Some(list) = reqs.as_array_mut() {
        list.extend([
            json!({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]}),
            json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": zones}),
        ]);
    }
    reqs
}

/// Events with `reason` in namespace `ns` (every namespace when `None`), as
/// (the object's name, the message).
pub async fn events(client: &Client, ns: Option<&str>, reason: &str) -> Vec<(String, String)> {
    use k8s_openapi::api::core::v1::Event;
    let api: Api<Event> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    api.list(&ListParams::default().fields(&format!("reason={reason}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.involved_object.name.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

pub fn requirements_on_demand_amd64() -> serde_json::Value {
    json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ])
}

/// A controller run the way a Deployment runs it: only the given environment
/// (nothing inherited from the test's), its own kubeconfig, plugin and
/// secrets directories.
pub struct Launch<'a> {
    pub kubeconfig: &'a std::path::Path,
    pub env: Vec<(String, String)>,
}

impl Controller {
    pub fn start_as_deployment(launch: Launch) -> Controller {
        let dir = tempfile::tempdir().expect("tempdir");
        let metrics = free_port();
        let log = dir.path().join("controller.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .env_clear()
            .envs(launch.env)
            .env("KUBECONFIG", launch.kubeconfig)
            .env("PRECOMPILED_DIR", precompiled_dir())
            .env("METRICS_ADDRESS", format!("127.0.0.1:{metrics}"))
            .env("LOG_FORMAT", "json")
            .args(["--log-level", "info,karpenter=debug", "controller"])
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start the controller");
        Controller {
            child,
            metrics,
            log,
            dir,
        }
    }
}

/// The cluster's helm, built with its other binaries.
pub fn helm_bin(c: &Cluster) -> PathBuf {
    std::path::Path::new(&c.kubectl).with_file_name("helm")
}

/// The API server's request counts (`apiserver_request_total`), by verb and
/// resource (`nodeclaims`, `kwoknodeclasses`, ...), summed over codes.
/// Counts are the whole server's: diff two readings around what is measured.
pub async fn api_requests(client: &Client) -> BTreeMap<(String, String), f64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("/metrics");
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let Some((labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(&format!("{name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let key = (label("verb"), label("resource"));
        *out.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// What `api_requests` counted between two readings, for these resources.
pub fn requests_between(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
    resources: &[&str],
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .filter(|((_, r), _)| resources.contains(&r.as_str()))
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}
