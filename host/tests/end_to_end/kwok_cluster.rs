//! The kwok provider against a real API server: instances are Nodes that
//! kwok makes Ready. Needs a cluster from `tests/cluster/up NAME` and
//! `KARPENTER_TEST_CLUSTER=NAME`; `.ci/run` does both and runs the ignored
//! tests.

use crate::common;
use common::cluster::SERIAL;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use karpenter_controller::records;

use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::{MemoryUse as Use, PluginConfig, Runtime, RuntimeOptions, wit};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Cluster {
    endpoint: String,
    ca: String,
    token: String,
}

fn cluster() -> Cluster {
    let name = std::env::var("KARPENTER_TEST_CLUSTER")
        .expect("set KARPENTER_TEST_CLUSTER to a cluster from tests/cluster/up");
    let root = std::env::var("XDG_RUNTIME_DIR").unwrap_or_else(|_| "/tmp".into());
    let env_file = format!("{root}/karpenter-clusters/{name}/env");
    let text = std::fs::read_to_string(&env_file).unwrap_or_else(|e| panic!("{env_file}: {e}"));
    let vars: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let read = |k: &str| std::fs::read_to_string(vars[k]).unwrap_or_else(|e| panic!("{k}: {e}"));
    Cluster {
        endpoint: vars["CLUSTER_ENDPOINT"].to_string(),
        ca: read("CLUSTER_CA_FILE"),
        token: read("CLUSTER_TOKEN_FILE").trim().to_string(),
    }
}

fn claim(name: &str) -> wit::NodeClaim {
    let req = records::requirement_in;
    wit::NodeClaim {
        name: name.into(),
        node_pool: "default".into(),
        labels: vec![("team".into(), "e2e".into())],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            req("kubernetes.io/arch", &["arm64"]),
            req("kubernetes.io/os", &["linux"]),
            req("karpenter.sh/capacity-type", &["on-demand"]),
            req(
                "node.kubernetes.io/instance-type",
                &["m-2x-arm64-linux", "m-4x-arm64-linux"],
            ),
        ],
        resource_requests: vec![("cpu".into(), "1".into())],
        node_class_ref: wit::NodeClassRef {
            group: "karpenter.kwok.sh".into(),
            kind: "KWOKNodeClass".into(),
            name: "default".into(),
        },
        provider_id: None,
        image_id: None,
        kubelet_version: None,
    }
}

/// A runtime that grants the kwok plugin the cluster's token, and the
/// directory that holds it.
fn kwok_runtime(c: &Cluster) -> (Arc<Runtime>, tempfile::TempDir) {
    let secrets = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(secrets.path().join("kube")).expect("mkdir");
    std::fs::write(secrets.path().join("kube/token"), &c.token).expect("token");
    let runtime = common::runtime_with(RuntimeOptions {
        secrets: SecretStore::new(
            Dir::open_ambient_dir(secrets.path(), ambient_authority()).expect("dir"),
        ),
        cluster: Arc::new(ClusterView::new("e2e", &c.endpoint, &c.ca)),
        extra_roots: vec![c.ca.clone().into_bytes()],
        ..RuntimeOptions::default()
    });
    (runtime, secrets)
}

fn kwok_config(c: &Cluster) -> PluginConfig {
    PluginConfig {
        allowed_hosts: vec![c.endpoint.clone()],
        secrets: vec!["kube/token".into()],
        ..PluginConfig::default()
    }
}

fn class() -> wit::NodeClass {
    wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    }
}

async fn node(c: &Cluster, name: &str) -> Option<serde_json::Value> {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(c.ca.as_bytes()).expect("ca"))
        .build()
        .expect("client");
    let r = client
        .get(format!("{}/api/v1/nodes/{name}", c.endpoint))
        .bearer_auth(&c.token)
        .send()
        .await
        .ok()?;
    if r.status() == 404 {
        return None;
    }
    r.json().await.ok()
}

async fn node_ready(c: &Cluster, name: &str) -> Option<bool> {
    let node = node(c, name).await?;
    Some(
        node["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"),
    )
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn kwok_instances_are_nodes_that_become_ready() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let (runtime, _secrets) = kwok_runtime(&c);
    let plugin = runtime
        .load("kwok", &common::plugin_wasm("kwok"), kwok_config(&c))
        .await
        .expect("loads");
    let class = class();
    let name = format!("kwok-e2e-{}", std::process::id());

    let created = plugin.create(&claim(&name), &class).await.expect("create");
    assert_eq!(created.provider_id, format!("kwok://{name}"));
    assert_eq!(
        created.instance_type, "m-2x-arm64-linux",
        "the cheapest allowed type"
    );
    assert_eq!(created.capacity_type, "on-demand");
    assert!(created.labels.contains(&("team".into(), "e2e".into())));
    // A retry after a crash returns the same instance, not a second one.
    let again = plugin
        .create(&claim(&name), &class)
        .await
        .expect("create again");
    assert_eq!(again.provider_id, created.provider_id);
    assert_eq!(
        plugin
            .list()
            .await
            .expect("list")
            .iter()
            .filter(|i| i.node_claim == name)
            .count(),
        1
    );
    assert_eq!(
        plugin
            .get(&created.provider_id)
            .await
            .expect("get")
            .instance_type,
        "m-2x-arm64-linux"
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    while node_ready(&c, &name).await != Some(true) {
        assert!(
            Instant::now() < deadline,
            "node {name} did not become Ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let stub = wit::NodeClaim {
        provider_id: Some(created.provider_id.clone()),
        ..claim(&name)
    };
    plugin.delete(&stub).await.expect("delete");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match plugin.delete(&stub).await {
            Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => break,
            other => assert!(Instant::now() < deadline, "still there: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let err = plugin.get(&created.provider_id).await.expect_err("gone");
    assert!(
        matches!(err.provider_error(), Some(wit::Error::NotFound(_))),
        "{err}"
    );
}

/// A catalog in the JSON of Karpenter's kwok provider, in its shape (an
/// offering per zone and capacity type): `fillers` types, then
/// `t-test-amd64-linux` with `cpu` CPUs, the cheapest.
fn karpenter_catalog(fillers: u32, cpu: u32) -> String {
    let item = |name: &str, cpu: u32, price: f64| {
        let offerings: Vec<String> = ["on-demand", "spot"]
            .iter()
            .flat_map(|capacity| {
                ["a", "b", "c", "d"].map(|zone| {
                    format!(
                        r#"{{"Price":{price},"Available":true,"Requirements":[{{"key":"karpenter.sh/capacity-type","operator":"In","values":["{capacity}"]}},{{"key":"topology.kubernetes.io/zone","operator":"In","values":["test-zone-{zone}"]}}]}}"#
                    )
                })
            })
            .collect();
        format!(
            r#"{{"name":"{name}","architecture":"amd64","operatingSystems":["linux"],"resources":{{"cpu":"{cpu}","memory":"{}Gi","pods":"110"}},"offerings":[{}]}}"#,
            cpu * 4,
            offerings.join(",")
        )
    };
    let mut items: Vec<String> = (0..fillers)
        .map(|i| {
            item(
                &format!("f-{i}-amd64-linux"),
                2 + i % 64,
                1.0 + f64::from(i),
            )
        })
        .collect();
    items.push(item("t-test-amd64-linux", cpu, 0.5));
    format!("[{}]", items.join(","))
}

fn catalog_claim(name: &str) -> wit::NodeClaim {
    let req = records::requirement_in;
    wit::NodeClaim {
        requirements: vec![
            req("kubernetes.io/arch", &["amd64"]),
            req("karpenter.sh/capacity-type", &["on-demand"]),
            req("node.kubernetes.io/instance-type", &["t-test-amd64-linux"]),
        ],
        ..claim(name)
    }
}

/// A Karpenter catalog in INSTANCE_TYPES is read whole once: its types go
/// to the plugin's cache, and a launch on a new instance reads its own type
/// from there rather than copying the setting into its memory. A load with
/// other settings starts with a cache of its own, so its launches follow
/// the new catalog while the load it replaces still serves.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_karpenter_catalog_is_read_once_and_launches_follow_its_changes() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let (runtime, _secrets) = kwok_runtime(&c);
    let wasm = common::plugin_wasm("kwok");
    let with_catalog = |cpu| PluginConfig {
        settings: BTreeMap::from([("INSTANCE_TYPES".into(), karpenter_catalog(2000, cpu))]),
        ..kwok_config(&c)
    };
    let catalog_bytes = karpenter_catalog(2000, 2).len();
    let pool = records::bare_node_pool("default", claim("pool").node_class_ref);
    let usage = |runtime: &Runtime| runtime.memory_usage("kwok").expect("budget");

    let first = runtime
        .load("kwok", &wasm, with_catalog(2))
        .await
        .expect("loads");
    let listed = first
        .listed_instance_types(&pool, &class())
        .await
        .expect("get-instance-types");
    assert_eq!(listed.len(), 2001);
    drop(first);
    assert!(
        usage(&runtime).of(Use::Cache) >= catalog_bytes,
        "the types are stored: {}",
        usage(&runtime)
    );

    // A reload with the same settings keeps them: its first instance
    // launches without reading the catalog.
    let second = runtime
        .load("kwok", &wasm, with_catalog(2))
        .await
        .expect("reloads");
    let pid = std::process::id();
    let small = format!("kwok-catalog-{pid}-a");
    let created = second
        .create(&catalog_claim(&small), &class())
        .await
        .expect("create");
    assert_eq!(created.instance_type, "t-test-amd64-linux");
    let linear = usage(&runtime).of(Use::LinearMemory);
    eprintln!(
        "kwok catalog: {catalog_bytes} bytes; the launch's instance holds {linear} bytes of linear memory"
    );
    assert!(
        linear < catalog_bytes,
        "a launch copied the catalog ({catalog_bytes} bytes) in: {}",
        usage(&runtime)
    );

    // Other settings: the new load starts without the stored types. The
    // load it replaces still answers meanwhile, and what it stores stays
    // its own.
    let third = runtime
        .load("kwok", &wasm, with_catalog(8))
        .await
        .expect("reloads with another catalog");
    let old = second
        .listed_instance_types(&pool, &class())
        .await
        .expect("the replaced load still answers");
    assert_eq!(old.len(), 2001);
    let large = format!("kwok-catalog-{pid}-b");
    third
        .create(&catalog_claim(&large), &class())
        .await
        .expect("create");
    let both = usage(&runtime).of(Use::Cache);
    drop(second);
    let one = usage(&runtime).of(Use::Cache);
    assert!(
        both >= 2 * catalog_bytes && (catalog_bytes..both).contains(&one),
        "the replaced load's cache is given back when it goes: {both} bytes, then {one}"
    );
    for (name, cpu) in [(&small, "2"), (&large, "8")] {
        let node = node(&c, name).await.expect("the node exists");
        assert_eq!(node["status"]["capacity"]["cpu"], cpu, "{name}");
        third.delete(&catalog_claim(name)).await.expect("delete");
    }
}
