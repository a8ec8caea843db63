//! The sandbox holds against plugins that misbehave on purpose: each gets a
//! clear error naming the plugin and the call, the host stays up, and the
//! next call on the same plugin works on a fresh instance.

mod common;

use karpenter_controller::records;
use karpenter_runtime::{CallError, Plugin, PluginConfig, Runtime, wit};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pool() -> wit::NodePool {
    records::bare_node_pool(
        "default",
        wit::NodeClassRef {
            group: "test.karpenter.sh".into(),
            kind: "MisbehaveNodeClass".into(),
            name: "default".into(),
        },
    )
}

fn class() -> wit::NodeClass {
    wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    }
}

async fn misbehaving(
    runtime: &Arc<Runtime>,
    mode: &str,
    tune: impl FnOnce(&mut PluginConfig),
) -> Plugin {
    let mut config = PluginConfig {
        settings: BTreeMap::from([("MODE".to_string(), mode.to_string())]),
        ..PluginConfig::default()
    };
    tune(&mut config);
    runtime
        .load(
            &format!("misbehave-{mode}"),
            &common::plugin_wasm("misbehave"),
            config,
        )
        .await
        .expect("the plugin loads: metadata always works")
}

/// Runs the misbehaviour, returns the error text, and checks that the plugin
/// still answers afterwards.
async fn failure(mode: &str, tune: impl FnOnce(&mut PluginConfig)) -> String {
    failure_timed(mode, tune).await.0
}

/// Like `failure`, also returning how long the failing call took.
async fn failure_timed(mode: &str, tune: impl FnOnce(&mut PluginConfig)) -> (String, Duration) {
    let runtime = common::runtime();
    let plugin = misbehaving(&runtime, mode, tune).await;
    let start = Instant::now();
    let err = plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect_err("the call must fail");
    let took = start.elapsed();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("plugin misbehave-{mode}: get-instance-types: ")),
        "{text}"
    );
    // The host is up and the next call on a fresh instance works.
    let policies = plugin.repair_policies().await.expect("next call works");
    assert!(policies.is_empty());
    let healthy = misbehaving(&runtime, "healthy", |_| {}).await;
    assert_eq!(
        healthy
            .get_instance_types(&pool(), &class())
            .await
            .expect("healthy plugin")
            .len(),
        1
    );
    (text, took)
}

#[tokio::test]
async fn reading_a_file_finds_no_filesystem() {
    let text = failure("read-file", |_| {}).await;
    assert!(text.contains("read /etc/hostname: Err("), "{text}");
    if let Ok(hostname) = std::fs::read_to_string("/etc/hostname") {
        assert!(
            !text.contains(hostname.trim()) || hostname.trim().is_empty(),
            "{text}"
        );
    }
}

#[tokio::test]
async fn the_environment_is_empty() {
    let text = failure("read-env", |_| {}).await;
    assert!(
        text.contains("HOME=Err(NotPresent), 0 variables visible"),
        "{text}"
    );
}

#[tokio::test]
async fn sockets_are_denied() {
    let text = failure("socket", |_| {}).await;
    assert!(text.contains("connect: Err("), "{text}");
}

#[tokio::test]
async fn http_to_a_host_not_allowed_is_denied() {
    let text = failure("http-denied", |c| {
        c.allowed_hosts = vec!["https://management.azure.com".into()]
    })
    .await;
    assert!(text.contains("denied by the host"), "{text}");
}

#[tokio::test]
async fn an_infinite_loop_hits_the_cpu_budget() {
    let (text, took) = failure_timed("loop", |c| c.cpu_ms = 200).await;
    assert!(text.contains("exceeded its CPU budget of 200 ms"), "{text}");
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_secs(3),
        "took {took:?}"
    );
}

#[tokio::test]
async fn allocating_a_gibibyte_hits_the_memory_cap() {
    let text = failure("alloc", |c| c.memory_mib = 64).await;
    assert!(
        text.contains("grew past its memory limit of 64 MiB (memoryMib)"),
        "{text}"
    );
}

#[tokio::test]
async fn a_panic_fails_the_call() {
    let text = failure("panic", |_| {}).await;
    // The guest's own message, from its stderr, not only the trap.
    assert!(text.contains("panicked"), "{text}");
    assert!(
        text.contains("its stderr: ") && text.contains("the plugin panicked on purpose"),
        "{text}"
    );
    assert!(!text.contains("RUST_BACKTRACE"), "{text}");
}

#[tokio::test]
async fn malformed_results_are_refused() {
    let text = failure("garbage", |_| {}).await;
    assert!(text.contains("returned an invalid result"), "{text}");
    assert!(text.contains("price NaN"), "{text}");
}

#[tokio::test]
async fn a_looping_plugin_does_not_block_other_plugins() {
    let runtime = common::runtime();
    // A single-threaded runtime: the healthy calls can only run if the
    // spinning plugin yields.
    let spinning = Arc::new(misbehaving(&runtime, "loop", |c| c.cpu_ms = 5_000).await);
    let healthy = misbehaving(&runtime, "healthy", |_| {}).await;
    let spin = tokio::spawn({
        let spinning = spinning.clone();
        async move { spinning.get_instance_types(&pool(), &class()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..10 {
        healthy
            .get_instance_types(&pool(), &class())
            .await
            .expect("healthy plugin answers");
    }
    assert!(
        !spin.is_finished(),
        "the spinning call should still be running"
    );
    let err = spin.await.expect("task").expect_err("budget");
    assert!(matches!(err, CallError::Failed { .. }));
}

#[tokio::test]
async fn a_component_that_is_not_a_provider_is_refused() {
    let runtime = common::runtime();
    let err = runtime
        .load("empty", b"(component)", PluginConfig::default())
        .await
        .err()
        .expect("refused");
    assert!(
        format!("{err:#}").contains("plugin empty: it does not export karpenter:provider/provider"),
        "{err:#}"
    );
}

#[tokio::test]
async fn an_unsupported_contract_version_is_refused_before_instantiation() {
    let runtime = common::runtime();
    let wat = r#"(component
        (instance $i)
        (export "karpenter:provider/provider@0.9.0" (instance $i)))"#;
    let err = runtime
        .load("future", wat.as_bytes(), PluginConfig::default())
        .await
        .err()
        .expect("refused");
    let text = format!("{err:#}");
    assert!(text.contains("implements karpenter:provider@0.9.0, which this host does not support (supported: 0.1.4, 0.1.3, 0.1.2, 0.1.1, 0.1.0)"), "{text}");
}

/// Hostile plugins run one at a time, so each one's peak RSS is its own.
static HOSTILE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Allowance above the budget for what the host allocates that is not the
/// plugin's: compiled code, wasmtime's bookkeeping, the test's own calls.
const RSS_SLACK_MIB: u64 = 64;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}

/// Runs `f` and returns how far the process's peak RSS rose above its RSS
/// before, in MiB (the kernel's high-water mark, reset first).
async fn peak_rss_growth_mib<R>(f: impl AsyncFnOnce() -> R) -> (R, u64) {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the RSS high-water mark");
    let before = status_kib("VmRSS:");
    let r = f().await;
    let peak = status_kib("VmHWM:");
    (r, peak.saturating_sub(before) / 1024)
}

#[tokio::test]
async fn a_cache_flood_stays_within_the_plugin_budget() {
    let _one = HOSTILE.lock().await;
    // Memory is what this measures: the CPU budget is wide enough that a
    // loaded machine cannot end the flood before the cache refuses it.
    let (text, growth) = peak_rss_growth_mib(async || {
        failure("cache-flood", |c| {
            c.memory_budget_mib = 128;
            c.cpu_ms = 20_000;
        })
        .await
    })
    .await;
    let kept: usize = text
        .split("kept ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(kept > 0 && kept < 128, "kept {kept} MiB of 3,000: {text}");
    println!(
        "cache flood: kept {kept} of 3000 entries of 1 MiB; peak host RSS +{growth} MiB, budget 128 MiB"
    );
    assert!(growth < 128 + RSS_SLACK_MIB, "peak RSS grew {growth} MiB");
}

#[tokio::test]
async fn a_cache_flood_at_load_does_not_stop_the_plugin_loading() {
    let _one = HOSTILE.lock().await;
    let (_, growth) = peak_rss_growth_mib(async || {
        let runtime = common::runtime();
        // Memory is what this measures. How long 3,000 refused 1 MiB writes
        // take depends on what ran in the test process before: after another
        // test, several times as long as alone, past the default CPU budget.
        let plugin = misbehaving(&runtime, "cache-flood-at-load", |c| {
            c.memory_budget_mib = 128;
            c.cpu_ms = 20_000;
        })
        .await;
        let usage = runtime.memory_usage(&plugin.name).expect("budget");
        assert!(usage.total() <= 128 << 20, "{usage}");
    })
    .await;
    println!("cache flood at load: peak host RSS +{growth} MiB, budget 128 MiB");
    assert!(growth < 128 + RSS_SLACK_MIB, "peak RSS grew {growth} MiB");
}

#[tokio::test]
async fn a_request_body_flood_is_cut_at_the_budget() {
    let _one = HOSTILE.lock().await;
    let (text, growth) = peak_rss_growth_mib(async || {
        failure("body-flood", |c| {
            c.memory_budget_mib = 128;
            c.allowed_hosts = vec!["http://127.0.0.1:9".into()];
            c.settings
                .insert("URL".into(), "http://127.0.0.1:9/sink".into());
        })
        .await
    })
    .await;
    assert!(text.contains("HttpRequestBodySize"), "{text}");
    println!("request body flood: {text}; peak host RSS +{growth} MiB, budget 128 MiB");
    assert!(growth < 128 + RSS_SLACK_MIB, "peak RSS grew {growth} MiB");
}

#[tokio::test]
async fn a_burst_of_calls_waits_for_memory_instead_of_failing() {
    // An instance starts at about 1.1 MiB: the budget holds three at once.
    let runtime = common::runtime();
    let plugin = Arc::new(
        misbehaving(&runtime, "sleep", |c| {
            c.memory_budget_mib = 4;
            c.memory_mib = 4;
        })
        .await,
    );
    let start = Instant::now();
    burst(&plugin, 12).await;
    // Twelve calls of 100 ms, at most three at a time.
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    let usage = runtime.memory_usage(&plugin.name).expect("budget");
    assert!(usage.total() <= 4 << 20, "{usage}");
}

#[tokio::test]
async fn a_burst_of_calls_leaves_one_instance_once_idle() {
    let runtime = common::runtime();
    let plugin = Arc::new(misbehaving(&runtime, "sleep", |_| {}).await);
    burst(&plugin, 8).await;
    let held = |runtime: &Runtime| runtime.memory_usage(&plugin.name).expect("budget").total();
    let after_burst = held(&runtime);
    assert_eq!(
        plugin.trim_idle(Instant::now()),
        0,
        "none idle for long yet"
    );
    let later = Instant::now() + karpenter_runtime::WARM_IDLE;
    assert_eq!(plugin.trim_idle(later), 7, "all but the last used");
    let idle = held(&runtime);
    assert!(
        idle * 4 < after_burst,
        "the budget held {after_burst} bytes after the burst and {idle} once idle"
    );
    plugin
        .get_instance_types(&pool(), &class())
        .await
        .expect("the kept instance serves the next call");
    let next = held(&runtime);
    assert!(
        next < idle + idle / 2,
        "on the kept instance, not a new one: {idle} bytes held before the call, {next} after"
    );
}

#[tokio::test]
async fn a_burst_of_short_calls_is_served_by_a_few_instances_reused() {
    let runtime = common::runtime();
    let plugin = Arc::new(misbehaving(&runtime, "sleep", |_| {}).await);
    let held = {
        let runtime = runtime.clone();
        let name = plugin.name.clone();
        move || runtime.memory_usage(&name).expect("budget").total()
    };
    // The instance the load's metadata call left warm.
    let one = held();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let done = done.clone();
        let held = held.clone();
        async move {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(held());
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            peak
        }
    });
    let start = Instant::now();
    burst(&plugin, 48).await;
    let took = start.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.await.expect("sampler");
    println!("48 calls of 100 ms: {took:?}; peak {peak} bytes, one instance {one}");
    // One instance each would have held 48 at once.
    assert!(
        peak <= 12 * one,
        "{} instances' memory at once",
        peak as f64 / one as f64
    );
    // Eight at a time, reused: six rounds of 100 ms.
    assert!(took >= Duration::from_millis(500), "{took:?}");
}

#[tokio::test]
async fn calls_that_run_long_keep_the_next_waiting_only_briefly() {
    let runtime = common::runtime();
    let plugin = Arc::new(
        misbehaving(&runtime, "sleep", |c| {
            c.settings.insert("SLEEP_MS".into(), "1500".into());
        })
        .await,
    );
    let start = Instant::now();
    burst(&plugin, 16).await;
    let took = start.elapsed();
    // Eight start at once and the other eight a moment later, each on an
    // instance of its own: not one after another in two rounds of 1.5 s.
    assert!(took < Duration::from_millis(2600), "{took:?}");
}

/// `calls` concurrent get-instance-types calls, each of which must succeed.
async fn burst(plugin: &Arc<Plugin>, calls: usize) {
    let calls: Vec<_> = (0..calls)
        .map(|_| {
            let plugin = plugin.clone();
            tokio::spawn(async move { plugin.get_instance_types(&pool(), &class()).await })
        })
        .collect();
    for call in calls {
        call.await
            .expect("task")
            .expect("each call answers in time");
    }
}

/// A NodePool of the misbehaving plugin's NodeClass, as the API server holds it.
fn node_pool_object(name: &str) -> karpenter_controller::crds::NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "test.karpenter.sh", "kind": "MisbehaveNodeClass", "name": "default"},
            "requirements": [],
        }}},
    }))
    .expect("NodePool")
}

#[tokio::test]
async fn a_slow_plugin_is_answered_for_by_its_last_catalog_within_the_deadline() {
    use karpenter_controller::instance_types::InstanceTypeCache;
    let runtime = common::runtime();
    let slow = misbehaving(&runtime, "slow-after-first", |_| {}).await;
    let healthy = misbehaving(&runtime, "healthy", |_| {}).await;
    // Every call asks the plugin again, as one past the TTL does.
    let cache = InstanceTypeCache::new(Duration::ZERO, Duration::from_millis(500));
    let (a, b) = (node_pool_object("a"), node_pool_object("b"));
    let first = cache
        .get(&slow, &a, &class(), "class-uid")
        .await
        .expect("the first answer is prompt");
    assert_eq!(first.len(), 1);

    // Asked again, the plugin now takes 10 s: its last catalog stands in at
    // the deadline, and a healthy plugin is not held up meanwhile.
    let start = Instant::now();
    let nc = class();
    let (slow_answer, healthy_answer) = tokio::join!(
        cache.get(&slow, &a, &nc, "class-uid"),
        cache.get(&healthy, &b, &nc, "class-uid"),
    );
    assert_eq!(slow_answer.expect("the last catalog").len(), 1);
    assert_eq!(healthy_answer.expect("healthy").len(), 1);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );

    // A NodePool never answered for has nothing to stand in: a clear error.
    let err = cache
        .get(&slow, &node_pool_object("c"), &class(), "class-uid")
        .await
        .expect_err("no catalog yet");
    assert!(
        err.to_string()
            .contains("did not list instance types within 500ms"),
        "{err}"
    );
}

#[tokio::test]
async fn a_secret_setting_is_read_fresh_and_grants_nothing_else() {
    use karpenter_runtime::RuntimeOptions;
    use karpenter_runtime::capabilities::secrets::SecretStore;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("kubelet-bootstrap-token")).expect("mkdir");
    let token = dir.path().join("kubelet-bootstrap-token/token");
    std::fs::write(&token, "abcdef.0123456789abcdef\n").expect("write");
    let runtime = common::runtime_with(RuntimeOptions {
        secrets: SecretStore::new(
            cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority())
                .expect("dir"),
        ),
        ..RuntimeOptions::default()
    });
    let plugin = misbehaving(&runtime, "settings", |c| {
        c.settings
            .insert("SECRET".into(), "kubelet-bootstrap-token/token".into());
        c.secret_settings.insert(
            "KUBELET_BOOTSTRAP_TOKEN".into(),
            "kubelet-bootstrap-token/token".into(),
        );
    })
    .await;
    let seen = async || {
        plugin
            .get_instance_types(&pool(), &class())
            .await
            .expect_err("reports what it saw")
            .to_string()
    };
    let text = seen().await;
    // The setting carries the Secret's value, without the file's newline...
    assert!(
        text.contains("KUBELET_BOOTSTRAP_TOKEN=abcdef.0123456789abcdef, MODE=settings"),
        "{text}"
    );
    // ...and referencing the Secret in a setting grants neither reading it
    // nor signing with it.
    let denied = "is not granted to plugin misbehave-settings";
    assert_eq!(text.matches(denied).count(), 2, "{text}");
    assert!(text.contains("signing with it: Err("), "{text}");
    // A rotated Secret reaches the plugin on its next call, without a reload.
    std::fs::write(&token, "ghijkl.0123456789abcdef").expect("rotate");
    let text = seen().await;
    assert!(
        text.contains("KUBELET_BOOTSTRAP_TOKEN=ghijkl.0123456789abcdef"),
        "{text}"
    );
    // A Secret that is gone leaves the setting unset, as if never given.
    std::fs::remove_file(&token).expect("remove");
    let text = seen().await;
    assert!(!text.contains("KUBELET_BOOTSTRAP_TOKEN"), "{text}");
}
