//! The real Nebius plugin (built by the test build) in
//! the host's runtime against the emulator, over h2c gRPC through the host's
//! outbound HTTP: auth, instance types, create (idempotent), get, list,
//! delete, capacity and quota failures, WireGuard addresses under 50
//! concurrent launches, and the conformance kit.
//!
//! With `KARPENTER_TEST_CLUSTER=NAME` (a cluster from `tests/cluster/up
//! NAME`) the emulator registers each instance's Node there and the test
//! checks it.

use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::{Plugin, PluginConfig, Runtime, RuntimeOptions, wit};
use nebius_emulator::{Emulator, Injection, Kube, Options, Quota};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROJECT: &str = "project-e00test";

fn wasm() -> Vec<u8> {
    let path = karpenter_test_plugins::path("nebius").expect("the test build builds nebius");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cluster() -> Option<Kube> {
    let name = std::env::var("KARPENTER_TEST_CLUSTER").ok()?;
    let dir = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let env = std::fs::read_to_string(format!("{dir}/karpenter-clusters/{name}/env")).ok()?;
    let get = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
    };
    Some(Kube {
        endpoint: get("CLUSTER_ENDPOINT")?,
        ca_pem: std::fs::read(get("CLUSTER_CA_FILE")?).ok()?,
        token: std::fs::read_to_string(get("CLUSTER_TOKEN_FILE")?)
            .ok()?
            .trim()
            .to_string(),
    })
}

struct Setup {
    emulator: Arc<Emulator>,
    plugin: Arc<Plugin>,
    runtime: Arc<Runtime>,
    kube: Option<Kube>,
    _secrets: tempdir::Dir,
    _server: tokio::task::JoinHandle<()>,
}

/// A throwaway directory, removed on drop.
mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn setup(options: Options, credentials: &[u8], extra: &[(&str, &str)]) -> Setup {
    let kube = cluster();
    let emulator = Emulator::new(Options {
        kube: kube.clone(),
        ..options
    })
    .expect("emulator");
    let (addr, server) = emulator.clone().serve(0).await.expect("serve");
    let base = format!("http://{addr}");
    let (endpoint, ca) = match &kube {
        Some(k) => (
            k.endpoint.clone(),
            String::from_utf8_lossy(&k.ca_pem).into_owned(),
        ),
        None => (
            "https://127.0.0.1:6443".to_string(),
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_string(),
        ),
    };
    let dir = std::env::temp_dir().join(format!(
        "nebius-secrets-{}-{}",
        std::process::id(),
        addr.port()
    ));
    std::fs::create_dir_all(dir.join("nebius-credentials")).expect("mkdir");
    std::fs::write(dir.join("nebius-credentials/credentials.json"), credentials).expect("write");
    let runtime = Runtime::new(RuntimeOptions {
        cluster: Arc::new(ClusterView::new("aks", &endpoint, &ca)),
        secrets: SecretStore::new(
            cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority()).expect("open"),
        ),
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let mut settings: BTreeMap<String, String> = [
        ("NEBIUS_API_ENDPOINT", base.as_str()),
        ("NEBIUS_IAM_ENDPOINT", base.as_str()),
        ("KUBELET_BOOTSTRAP_TOKEN", "abcdef.0123456789abcdef"),
        ("OPERATION_POLL_MS", "20"),
        ("WIREGUARD_HUB_ENDPOINT", "20.91.194.208:51820"),
        ("WIREGUARD_HUB_PUBLIC_KEY", "aHViLXB1YmxpYy1rZXk="),
        ("WIREGUARD_HUB_ADDRESS", "100.96.0.1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        settings.insert(k.to_string(), v.to_string());
    }
    let config = PluginConfig {
        allowed_hosts: vec![base.clone()],
        h2c_hosts: vec![addr.to_string()],
        secrets: vec!["nebius-credentials/credentials.json".into()],
        settings,
        ..PluginConfig::default()
    };
    let plugin = Arc::new(
        runtime
            .load("nebius", &wasm(), config)
            .await
            .expect("plugin loads"),
    );
    Setup {
        emulator,
        plugin,
        runtime,
        kube,
        _secrets: tempdir::Dir(dir),
        _server: server,
    }
}

fn class(wireguard: Option<&str>) -> wit::NodeClass {
    let mut spec = serde_json::json!({"projectID": PROJECT, "region": "eu-north1", "subnetID": "vpcsubnet-e00test"});
    if let Some(c) = wireguard {
        spec["wireguardPeerCIDR"] = c.into();
    }
    wit::NodeClass {
        name: "nebius".into(),
        generation: 1,
        json: serde_json::json!({"apiVersion": "flex.aks.azure.com/v1alpha1", "kind": "NebiusNodeClass", "metadata": {"name": "nebius"}, "spec": spec}).to_string(),
    }
}

fn pool() -> wit::NodePool {
    wit::NodePool {
        name: "nebius-cpu-nodepool".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        node_class_ref: wit::NodeClassRef {
            group: "flex.aks.azure.com".into(),
            kind: "NebiusNodeClass".into(),
            name: "nebius".into(),
        },
    }
}

fn req(key: &str, values: &[&str]) -> wit::Requirement {
    wit::Requirement {
        key: key.into(),
        operator: wit::Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

fn claim(name: &str, types: &[&str], capacity_type: &str) -> wit::NodeClaim {
    wit::NodeClaim {
        name: name.into(),
        node_pool: "nebius-cpu-nodepool".into(),
        labels: vec![("team".into(), "a".into())],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            req("node.kubernetes.io/instance-type", types),
            req("karpenter.sh/capacity-type", &[capacity_type]),
        ],
        resource_requests: vec![("cpu".into(), "1".into())],
        node_class_ref: pool().node_class_ref,
        provider_id: None,
        image_id: None,
        kubelet_version: None,
    }
}

async fn wait_until(what: &str, check: impl Fn() -> bool) {
    for _ in 0..100 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: timed out")
}

fn is_not_found(e: &karpenter_runtime::CallError) -> bool {
    matches!(e.provider_error(), Some(wit::Error::NotFound(_)))
}

/// The next InstanceService/Create answers INVALID_ARGUMENT.
fn fail_next_instance_create(s: &Setup) {
    s.emulator.inject(Injection {
        method: "InstanceService/Create".into(),
        platform: String::new(),
        code: 3,
        detail: String::new(),
        count: 1,
    });
}

/// Delete until the plugin answers not-found, as the host does.
async fn delete_until_gone(s: &Setup, c: &wit::NodeClaim) -> usize {
    for calls in 1..100 {
        match s.plugin.delete(c).await {
            Ok(()) => tokio::time::sleep(Duration::from_millis(30)).await,
            Err(e) if is_not_found(&e) => return calls,
            Err(e) => panic!("delete: {e}"),
        }
    }
    panic!("{} never went away", c.name)
}

async fn node(kube: &Kube, name: &str) -> Option<serde_json::Value> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&kube.ca_pem).ok()?)
        .build()
        .ok()?;
    let r = client
        .get(format!("{}/api/v1/nodes/{name}", kube.endpoint))
        .bearer_auth(&kube.token)
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

fn label<'a>(it: &'a wit::InstanceType, key: &str) -> Option<&'a str> {
    it.requirements
        .iter()
        .find(|r| r.key == key)
        .map(|r| r.values[0].as_str())
}

#[tokio::test]
async fn the_nebius_plugin_passes_the_conformance_kit_against_the_emulator() {
    let s = setup(
        Options {
            page_size: 2,
            ..Options::default()
        },
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    let class: serde_json::Value = serde_json::from_str(&class(None).json).expect("json");
    let options = karpenter::conformance::Options {
        node_class: Some(class),
        ..karpenter::conformance::Options::default()
    };
    let report = karpenter::conformance::run(&s.plugin, &options).await;
    eprintln!("{report}");
    assert!(report.passed(), "{report}");
    assert!(
        s.emulator.instances().is_empty(),
        "the kit deleted what it made: {:?}",
        s.emulator.instances()
    );
}

#[tokio::test]
async fn create_get_list_delete() {
    let s = setup(
        Options {
            page_size: 2, // every list pages
            ..Options::default()
        },
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    let status = s
        .plugin
        .validate_node_class(&class(None))
        .await
        .expect("validates");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert!(
        matches!(ready.status, wit::ConditionStatus::True),
        "{:?}",
        status.conditions
    );

    let types = s
        .plugin
        .get_instance_types(&pool(), &class(None))
        .await
        .expect("instance types")
        .into_listed();
    let cpu = types
        .iter()
        .find(|t| t.name == "cpu-d3-16vcpu-64gb")
        .expect("cpu-d3-16vcpu-64gb");
    let gpu = types
        .iter()
        .find(|t| t.name == "gpu-h100-sxm-8gpu-128vcpu-1600gb")
        .expect("gpu-h100-sxm-8gpu-128vcpu-1600gb");
    assert_eq!(label(cpu, "karpenter.azure.com/sku-cpu"), Some("16"));
    assert_eq!(label(gpu, "karpenter.azure.com/sku-cpu"), None);
    assert_eq!(label(gpu, "karpenter.azure.com/sku-gpu-count"), Some("8"));
    assert_eq!(label(cpu, "topology.kubernetes.io/zone"), Some("eu-north1"));
    // Preemptibles only where the platform allows them.
    let e2 = types
        .iter()
        .find(|t| t.name == "cpu-e2-4vcpu-16gb")
        .expect("cpu-e2");
    assert!(e2.offerings.iter().all(|o| o.capacity_type == "on-demand"));
    assert!(gpu.offerings.iter().any(|o| o.capacity_type == "spot"));
    assert_eq!(s.emulator.exchanges(), 1, "one token exchange so far");

    let c = claim(
        "nebius-cpu-nodepool-6g8v8",
        &["cpu-d3-16vcpu-64gb"],
        "on-demand",
    );
    let i = s.plugin.create(&c, &class(None)).await.expect("create");
    assert_eq!(i.instance_type, "cpu-d3-16vcpu-64gb");
    assert_eq!(i.provider_id, "aks-nebius://nebius-cpu-nodepool-6g8v8");
    assert_eq!(i.zone, "eu-north1");
    assert!(matches!(i.state, wit::InstanceState::Running));
    assert_eq!(s.emulator.instances(), ["nebius-cpu-nodepool-6g8v8"]);
    assert_eq!(s.emulator.disks(), ["nebius-cpu-nodepool-6g8v8-boot"]);
    let ud = s
        .emulator
        .user_data("nebius-cpu-nodepool-6g8v8")
        .expect("user data");
    assert!(ud.contains("token: abcdef.0123456789abcdef"), "{ud}");
    assert!(ud.contains("karpenter.sh/unregistered=:NoExecute"), "{ud}");
    assert!(ud.contains("--provider-id=aks-nebius://nebius-cpu-nodepool-6g8v8"));
    assert!(
        !ud.contains("wg0"),
        "no WireGuard without wireguardPeerCIDR"
    );

    // Idempotent by NodeClaim name.
    let again = s.plugin.create(&c, &class(None)).await.expect("again");
    assert_eq!(again.provider_id, i.provider_id);
    assert_eq!(s.emulator.instances().len(), 1);
    assert_eq!(s.emulator.disks().len(), 1);

    let got = s.plugin.get(&i.provider_id).await.expect("get");
    assert_eq!(got.node_claim, c.name);
    assert!(got.capacity.contains(&("cpu".into(), "16".into())));
    let c2 = claim(
        "nebius-cpu-nodepool-a1b2c",
        &["cpu-e2-2vcpu-8gb"],
        "on-demand",
    );
    s.plugin.create(&c2, &class(None)).await.expect("second");
    let c3 = claim(
        "nebius-gpu-nodepool-r2qwq",
        &["gpu-h100-sxm-8gpu-128vcpu-1600gb"],
        "spot",
    );
    let g = s.plugin.create(&c3, &class(None)).await.expect("gpu spot");
    assert_eq!(g.capacity_type, "spot");
    assert!(
        s.emulator
            .user_data(&c3.name)
            .is_some_and(|u| u.contains("nvidia") || u.contains("KUBELET_FLAGS"))
    );
    let mut names: Vec<String> = s
        .plugin
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|i| i.node_claim)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "nebius-cpu-nodepool-6g8v8",
            "nebius-cpu-nodepool-a1b2c",
            "nebius-gpu-nodepool-r2qwq"
        ]
    );
    assert_eq!(
        s.emulator.exchanges(),
        1,
        "the token is cached across calls"
    );

    if let Some(kube) = &s.kube {
        let labels = s.emulator.instance_labels();
        assert_eq!(labels.len(), 3);
        let names = s.emulator.requests();
        assert!(names.iter().any(|r| r == "InstanceService/Create"));
        // Node names are computeinstance-<id>.
        let mut found = false;
        for id in s.emulator.instance_ids() {
            if let Some(n) = node(kube, &id).await
                && n["spec"]["providerID"] == i.provider_id.as_str()
            {
                assert_eq!(n["metadata"]["labels"]["team"], "a");
                assert_eq!(
                    n["metadata"]["labels"]["node.kubernetes.io/instance-type"],
                    "cpu-d3-16vcpu-64gb"
                );
                let taints = n["spec"]["taints"].to_string();
                assert!(taints.contains("karpenter.sh/unregistered"), "{taints}");
                found = true;
            }
        }
        assert!(found, "the Node registered");
    }

    for claim in [&c, &c2, &c3] {
        let calls = delete_until_gone(&s, claim).await;
        assert!(calls >= 3, "instance, then disk, then not-found: {calls}");
    }
    assert!(s.emulator.instances().is_empty());
    assert!(s.emulator.disks().is_empty(), "{:?}", s.emulator.disks());
    let gone = s.plugin.get(&i.provider_id).await.expect_err("gone");
    assert!(is_not_found(&gone), "{gone}");

    // A revoked token is exchanged anew.
    s.emulator.revoke_tokens();
    let first = s.plugin.list().await;
    assert!(first.is_err(), "an unknown token is refused");
    s.plugin.list().await.expect("a fresh token");
    assert_eq!(s.emulator.exchanges(), 2);
}

#[tokio::test]
async fn credentials_that_do_not_verify_are_refused() {
    let creds: serde_json::Value =
        serde_json::from_slice(nebius_emulator::iam::test_credentials()).expect("json");
    let mut wrong = creds.clone();
    wrong["subject-credentials"]["kid"] = "publickey-someone-else".into();
    let s = setup(Options::default(), wrong.to_string().as_bytes(), &[]).await;
    let e = s
        .plugin
        .get_instance_types(&pool(), &class(None))
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("unknown kid"), "{e}");
    assert_eq!(s.emulator.exchanges(), 0);
}

#[tokio::test]
async fn capacity_and_quota_failures_mark_the_offering_unavailable() {
    let s = setup(
        Options {
            quota: Quota {
                platform_units: [("gpu-h200-sxm".to_string(), 4)].into(),
                capacity: [("gpu-h100-sxm".to_string(), 0)].into(),
            },
            ..Options::default()
        },
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    // not_enough_resources, in the operation.
    let c = claim("gpu-a", &["gpu-h100-sxm-8gpu-128vcpu-1600gb"], "on-demand");
    let e = s
        .plugin
        .create(&c, &class(None))
        .await
        .expect_err("no capacity");
    let Some(wit::Error::InsufficientCapacity(ic)) = e.provider_error() else {
        panic!("{e}")
    };
    assert!(
        ic.message.contains("not enough resources"),
        "{}",
        ic.message
    );
    assert_eq!(ic.offerings.len(), 1);
    assert_eq!(
        ic.offerings[0].instance_type,
        "gpu-h100-sxm-8gpu-128vcpu-1600gb"
    );
    assert!(s.emulator.instances().is_empty());
    wait_until("the boot disk is cleaned up", || {
        s.emulator.disks().is_empty()
    })
    .await;
    // quota_failure, refused at Create.
    let c = claim("gpu-b", &["gpu-h200-sxm-8gpu-128vcpu-1600gb"], "on-demand");
    let e = s
        .plugin
        .create(&c, &class(None))
        .await
        .expect_err("over quota");
    let Some(wit::Error::InsufficientCapacity(ic)) = e.provider_error() else {
        panic!("{e}")
    };
    assert!(ic.message.contains("quota exceeded"), "{}", ic.message);
    let types = s
        .plugin
        .get_instance_types(&pool(), &class(None))
        .await
        .expect("types")
        .into_listed();
    for t in &types {
        for o in &t.offerings {
            let failed = (t.name == "gpu-h100-sxm-8gpu-128vcpu-1600gb"
                || t.name == "gpu-h200-sxm-8gpu-128vcpu-1600gb")
                && o.capacity_type == "on-demand";
            assert_eq!(o.available, !failed, "{} {}", t.name, o.capacity_type);
        }
    }
    // Within quota it launches; an injected error is a plain create error.
    let ok = claim("gpu-c", &["gpu-h200-sxm-1gpu-16vcpu-200gb"], "on-demand");
    s.plugin
        .create(&ok, &class(None))
        .await
        .expect("within quota");
    fail_next_instance_create(&s);
    let e = s
        .plugin
        .create(
            &claim("cpu-x", &["cpu-d3-4vcpu-16gb"], "on-demand"),
            &class(None),
        )
        .await
        .expect_err("injected");
    assert!(
        matches!(e.provider_error(), Some(wit::Error::CreateError(_))),
        "{e}"
    );
}

#[tokio::test]
async fn wireguard_addresses_never_collide_across_50_concurrent_launches() {
    let s = setup(
        Options {
            op_duration: Duration::from_millis(300),
            ..Options::default()
        },
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    // Nodes already hold a few addresses of the range.
    let taken: Vec<String> = (2..=6).map(|i| format!("100.96.0.{i}")).collect();
    s.runtime.cluster.set_node_internal_ips(taken.clone());
    let cidr = "100.96.0.0/26"; // 62 usable; the hub (.1) and 5 Nodes leave 56
    let class = class(Some(cidr));
    s.plugin
        .validate_node_class(&class)
        .await
        .expect("validates");
    let started = Instant::now();
    let launches: Vec<_> = (0..50)
        .map(|i| {
            let plugin = s.plugin.clone();
            let class = class.clone();
            tokio::spawn(async move {
                let c = claim(&format!("wg-{i:02}"), &["cpu-d3-4vcpu-16gb"], "on-demand");
                plugin.create(&c, &class).await
            })
        })
        .collect();
    for l in launches {
        l.await.expect("join").expect("create");
    }
    eprintln!(
        "50 concurrent creates with WireGuard: {:?}",
        started.elapsed()
    );
    let addresses: Vec<String> = s
        .emulator
        .instance_labels()
        .iter()
        .map(|l| l.get("wireguard-address").cloned().expect("address label"))
        .collect();
    let distinct: HashSet<&String> = addresses.iter().collect();
    assert_eq!(addresses.len(), 50);
    assert_eq!(distinct.len(), 50, "{addresses:?}");
    for a in &addresses {
        assert!(!taken.contains(a) && a != "100.96.0.1", "{a} was in use");
        let ud = s
            .emulator
            .user_data(&s.emulator.name_with_address(a).expect("instance"))
            .expect("ud");
        assert!(ud.contains(&format!("Address = {a}/26")), "{ud}");
        assert!(ud.contains(&format!("--node-ip={a}")));
    }
    // Six addresses remain; the seventh launch finds none.
    for i in 50..56 {
        let c = claim(&format!("wg-{i}"), &["cpu-d3-4vcpu-16gb"], "on-demand");
        s.plugin.create(&c, &class).await.expect("room left");
    }
    let c = claim("wg-full", &["cpu-d3-4vcpu-16gb"], "on-demand");
    let e = s.plugin.create(&c, &class).await.expect_err("exhausted");
    let Some(wit::Error::InsufficientCapacity(ic)) = e.provider_error() else {
        panic!("{e}")
    };
    assert!(
        ic.message
            .contains("no free WireGuard address in wireguardPeerCIDR 100.96.0.0/26"),
        "{}",
        ic.message
    );
    assert!(!s.emulator.disks().contains(&"wg-full-boot".to_string()));
    // Deleting one frees its address for the next launch.
    let freed = s
        .emulator
        .instance_labels()
        .iter()
        .find(|l| l.get("karpenter-nodeclaim").map(String::as_str) == Some("wg-07"))
        .and_then(|l| l.get("wireguard-address").cloned())
        .expect("wg-07");
    delete_until_gone(&s, &claim("wg-07", &["cpu-d3-4vcpu-16gb"], "on-demand")).await;
    s.plugin.create(&c, &class).await.expect("room again");
    assert_eq!(
        s.emulator.name_with_address(&freed).as_deref(),
        Some("wg-full")
    );
}

/// The plugin's own share of a create: wall time less the time the emulator
/// spent answering, with operations done at once (no polling waits).
#[tokio::test]
async fn create_latency_overhead() {
    let s = setup(
        Options {
            op_duration: Duration::ZERO,
            ..Options::default()
        },
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    // Warm: the token and the platform list are cached, an instance is warm.
    s.plugin
        .get_instance_types(&pool(), &class(None))
        .await
        .expect("types")
        .into_listed();
    let mut samples = Vec::new();
    for i in 0..20 {
        let c = claim(&format!("lat-{i}"), &["cpu-d3-4vcpu-16gb"], "on-demand");
        let busy = s.emulator.busy();
        let calls = s.emulator.requests().len();
        let t = Instant::now();
        s.plugin.create(&c, &class(None)).await.expect("create");
        let wall = t.elapsed();
        let server = s.emulator.busy() - busy;
        samples.push((
            wall,
            wall.saturating_sub(server),
            s.emulator.requests().len() - calls,
        ));
    }
    samples.sort();
    let (wall, own, calls) = samples[samples.len() / 2];
    eprintln!(
        "create latency (median of 20, no operation waits): {wall:?} wall, {own:?} outside the emulator's handlers, {calls} gRPC calls"
    );
    assert!(own < Duration::from_secs(2), "{own:?}");
}

/// After a restart the plugin knows no project until a NebiusNodeClass is
/// validated: it must say it cannot tell, never "no instances" or
/// not-found, or garbage collection would take the whole fleet for gone.
#[tokio::test]
async fn before_it_knows_a_project_it_cannot_tell_rather_than_answer_nothing() {
    let s = setup(
        Options::default(),
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    let c = claim("nebius-cpu-known", &["cpu-d3-16vcpu-64gb"], "on-demand");
    s.plugin
        .validate_node_class(&class(None))
        .await
        .expect("validates");
    let launched = s.plugin.create(&c, &class(None)).await.expect("create");

    // The same cloud, seen by a freshly started host.
    let restarted = s
        .runtime
        .load("nebius-restarted", &wasm(), s.plugin.config().clone())
        .await
        .expect("plugin loads");
    let cannot_tell = |e: &karpenter_runtime::CallError| matches!(e.provider_error(), Some(wit::Error::Other(o)) if o.retryable && o.message.contains("no Nebius project known yet"));
    let listed = restarted.list().await.expect_err("cannot list yet");
    assert!(cannot_tell(&listed), "{listed}");
    let got = restarted
        .get(&launched.provider_id)
        .await
        .expect_err("cannot look up yet");
    assert!(cannot_tell(&got), "{got}");

    // Once it has seen the NodeClass it sees the instance again.
    restarted
        .validate_node_class(&class(None))
        .await
        .expect("validates");
    let listed = restarted.list().await.expect("lists");
    assert!(listed.iter().any(|i| i.provider_id == launched.provider_id));
    restarted.get(&launched.provider_id).await.expect("found");
    delete_until_gone(&s, &c).await;
}

/// A boot disk whose instance was never made (the instance create failed)
/// is listed as an instance of its own, and deleting that instance removes
/// the disk: garbage collection leaves no disk behind.
#[tokio::test]
async fn a_boot_disk_left_without_its_instance_is_listed_and_collected() {
    let s = setup(
        Options::default(),
        nebius_emulator::iam::test_credentials(),
        &[],
    )
    .await;
    s.plugin
        .validate_node_class(&class(None))
        .await
        .expect("validates");
    fail_next_instance_create(&s);
    let c = claim("cpu-orphan", &["cpu-d3-4vcpu-16gb"], "on-demand");
    s.plugin
        .create(&c, &class(None))
        .await
        .expect_err("the instance is never made");
    assert!(s.emulator.instances().is_empty());
    assert_eq!(s.emulator.disks().len(), 1, "the boot disk stays");

    let listed = s.plugin.list().await.expect("lists");
    let orphan = listed
        .iter()
        .find(|i| i.node_claim == "cpu-orphan")
        .unwrap_or_else(|| panic!("the orphan disk is listed: {listed:?}"));
    assert_eq!(orphan.provider_id, "aks-nebius://cpu-orphan/boot-disk");
    assert!(orphan.created_at.is_none());

    // What the host's garbage collection does with an instance no NodeClaim owns.
    let mut gone = claim("cpu-orphan", &[], "on-demand");
    gone.provider_id = Some(orphan.provider_id.clone());
    delete_until_gone(&s, &gone).await;
    assert!(s.emulator.disks().is_empty());
    assert!(
        s.plugin
            .list()
            .await
            .expect("lists")
            .iter()
            .all(|i| i.node_claim != "cpu-orphan")
    );
}
