//! End-to-end: the conformance kit passes for the kwok plugin (Rust) and the
//! static-inventory plugin (JavaScript, examples/plugins/static-inventory)
//! against the real local control plane, and the controller runs pods on the
//! JavaScript plugin's nodes. Needs `tests/cluster/up NAME`,
//! `KARPENTER_TEST_CLUSTER=NAME`, `make plugins js-plugins`.

use crate::common;

use common::cluster::*;
use common::plugin_path;
use karpenter_runtime::{PluginConfig, RuntimeOptions};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

/// Four machines in two racks; kwok keeps their Nodes Ready.
fn static_config(c: &Cluster, prefix: &str) -> serde_json::Value {
    let machines = json!([
        {"name": format!("{prefix}-r1-a"), "zone": "rack-1", "cpu": "4", "memory": "16Gi", "price": 0.05},
        {"name": format!("{prefix}-r1-b"), "zone": "rack-1", "cpu": "4", "memory": "16Gi", "price": 0.05},
        {"name": format!("{prefix}-r2-a"), "zone": "rack-2", "cpu": "4", "memory": "16Gi", "price": 0.06},
        {"name": format!("{prefix}-r2-big"), "zone": "rack-2", "cpu": "16", "memory": "64Gi", "price": 0.2},
    ]);
    json!({
        "allowedHosts": [c.endpoint],
        "secrets": ["kube/token"],
        "settings": {
            "MACHINES": machines.to_string(),
            "NODE_ANNOTATIONS": json!({"kwok.x-k8s.io/node": "fake"}).to_string(),
        },
    })
}

/// `karpenter plugin test` against the cluster; its output, having passed.
fn plugin_test(c: &Cluster, name: &str, config: &serde_json::Value) -> String {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(dir.path().join("secrets/kube")).expect("mkdir");
    std::fs::write(dir.path().join("secrets/kube/token"), &c.token).expect("token");
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, config.to_string()).expect("config");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["plugin", "test"])
        .arg(plugin_path(name))
        .args(["--endpoint", &c.endpoint, "--ca-file", &c.ca_file])
        .arg("--config")
        .arg(&config_file)
        .arg("--secrets-dir")
        .arg(dir.path().join("secrets"))
        .output()
        .expect("karpenter runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "{name}: {:.1} s\n{stdout}{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} fails the kit:\n{stdout}");
    stdout
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn kwok_and_the_javascript_provider_pass_the_conformance_kit() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let kwok = plugin_test(
        &c,
        "kwok",
        &json!({"allowedHosts": [c.endpoint], "secrets": ["kube/token"]}),
    );
    assert!(kwok.contains("PASS  create-idempotent"), "{kwok}");
    let js = plugin_test(
        &c,
        "static-inventory",
        &static_config(&c, &format!("kit-{}", std::process::id())),
    );
    assert!(js.contains("PASS  well-known-labels"), "{js}");
    assert!(js.contains("0 failed"), "{js}");
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn pods_run_on_nodes_of_the_javascript_provider() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    install_wasm_crds(
        &c,
        &plugin_path("static-inventory"),
        &["staticnodeclasses.example.karpenter.sh"],
    );
    let id = std::process::id();
    let (ns, pool) = (format!("e2e-static-{id}"), format!("static-{id}"));
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(
        &c,
        json!({
            "apiVersion": "example.karpenter.sh/v1alpha1",
            "kind": "StaticNodeClass",
            "metadata": {"name": "rack"},
            "spec": {}
        }),
    );
    let mut np = node_pool(pool, json!([]));
    np["spec"]["template"]["spec"]["nodeClassRef"] =
        json!({"group": "example.karpenter.sh", "kind": "StaticNodeClass", "name": "rack"});
    apply(&c, np);
    apply(&c, deployment(ns, "inflate", pool, 0, "3", true));
    let wasm = std::fs::read(plugin_path("static-inventory")).expect("make js-plugins");
    let controller = Controller::start_with_plugin(
        &c,
        "static-inventory",
        &wasm,
        &static_config(&c, &format!("e2e-{id}")),
        &["--disable-leader-election"],
    );

    let scaled = Instant::now();
    scale(&client, ns, "inflate", 3).await;
    // The first start compiles the 14 MB component: allow for it.
    wait_for("3 pods running", Duration::from_secs(300), || {
        pods_running(&client, ns, "inflate", 3)
    })
    .await;
    eprintln!(
        "3 pods running on static machines {:.1}s after scaling",
        scaled.elapsed().as_secs_f64()
    );
    let nodes = kwok_nodes(&client, pool).await;
    assert_eq!(nodes.len(), 3, "one machine per pod (anti-affinity)");
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        assert!(
            name.starts_with(&format!("e2e-{id}-")),
            "a machine of the inventory: {name}"
        );
        let id = n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .unwrap_or_default();
        assert_eq!(id, format!("static://{name}"));
    }
    // The cheapest machines went first: the 4-CPU ones, never the big one.
    assert!(!nodes.iter().any(|n| {
        n.metadata
            .name
            .as_deref()
            .is_some_and(|m| m.ends_with("-big"))
    }));
    assert!(
        controller
            .metric("karpenter_nodeclaims_created_total")
            .await
            >= 3.0
    );
    clean_up(&client, ns, pool).await;
    drop(controller);
}

/// The figures of the JavaScript and Python components next to the Rust
/// kwok plugin, in one run: size, first load (the quick compile, serving at
/// once), when Cranelift's code took over (at once for a large component;
/// kwok's cheap calls never make it hot), load from the precompiled cache,
/// and a trivial call's latency on each code.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs `make plugins js-plugins py-plugins`; prints figures"]
async fn figures_of_the_javascript_component_next_to_rust() {
    for name in ["kwok", "static-inventory", "inventory"] {
        let wasm = std::fs::read(plugin_path(name)).expect("built");
        let cache = tempfile::tempdir().expect("tmp");
        let runtime = || {
            karpenter_runtime::Runtime::new(RuntimeOptions {
                precompiled: Some(
                    cap_std::fs::Dir::open_ambient_dir(cache.path(), cap_std::ambient_authority())
                        .expect("dir"),
                ),
                ..RuntimeOptions::default()
            })
            .expect("runtime")
        };
        let p50 = async |plugin: &karpenter_runtime::Plugin| {
            let mut calls = Vec::new();
            for _ in 0..200 {
                let t = Instant::now();
                plugin.repair_policies().await.expect("call");
                calls.push(t.elapsed());
            }
            calls.sort();
            calls[100].as_secs_f64() * 1e6
        };
        let t = Instant::now();
        let first = runtime()
            .load(name, &wasm, PluginConfig::default())
            .await
            .expect("load");
        let serving = t.elapsed();
        let quick_call = (!first.optimized()).then_some(p50(&first).await);
        // Past the size a plugin on its quick compile is optimized at once.
        let large = wasm.len() >= 4 << 20;
        while large && !first.optimized() {
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "{name}: never optimized"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let optimized = t.elapsed();
        if quick_call.is_some() {
            assert!(
                serving < optimized,
                "{name}: served before it was optimized"
            );
        }
        drop(first);
        let t = Instant::now();
        let plugin = runtime()
            .load(name, &wasm, PluginConfig::default())
            .await
            .expect("load");
        let cached = t.elapsed();
        assert_eq!(
            plugin.optimized(),
            large,
            "{name}: the cache holds Cranelift's code once it was optimized"
        );
        assert!(
            cached < serving,
            "{name}: the precompiled load is the faster one"
        );
        let optimized = if large {
            format!("optimized after {:.0} ms", optimized.as_secs_f64() * 1e3)
        } else {
            "never optimized (its calls stay cold)".to_string()
        };
        eprintln!(
            "figures {name}: size {} bytes, first load (compile + metadata) {:.0} ms{}, {optimized}, precompiled load {:.1} ms, repair-policies call p50 {:.1} µs{}",
            wasm.len(),
            serving.as_secs_f64() * 1e3,
            if quick_call.is_some() {
                " on the quick compile"
            } else {
                ""
            },
            cached.as_secs_f64() * 1e3,
            p50(&plugin).await,
            quick_call
                .filter(|_| large)
                .map(|us| format!(" ({us:.1} µs on the quick compile)"))
                .unwrap_or_default(),
        );
    }
}
