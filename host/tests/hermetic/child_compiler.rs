//! The controller compiles plugins in a child process running its own
//! executable (`karpenter plugin compile`): what it loads works, lands in the
//! precompiled cache, and a plugin that does not compile is refused with the
//! compiler's own message.

use crate::common;

use karpenter_runtime::{Compiler, PluginConfig, Runtime, RuntimeOptions};
use std::path::PathBuf;

fn runtime(cache: &std::path::Path, compiler: Compiler) -> std::sync::Arc<Runtime> {
    Runtime::new(RuntimeOptions {
        precompiled: Some(
            cap_std::fs::Dir::open_ambient_dir(cache, cap_std::ambient_authority())
                .expect("cache dir"),
        ),
        compiler,
        ..RuntimeOptions::default()
    })
    .expect("runtime")
}

fn karpenter() -> Compiler {
    Compiler::Child(PathBuf::from(env!("CARGO_BIN_EXE_karpenter")))
}

/// A NodePool and NodeClass of the misbehave plugin's, to ask it for
/// instance types.
fn misbehave_class() -> (
    karpenter_runtime::wit::NodePool,
    karpenter_runtime::wit::NodeClass,
) {
    let pool = karpenter_controller::records::bare_node_pool(
        "default",
        karpenter_runtime::wit::NodeClassRef {
            group: "test.karpenter.sh".into(),
            kind: "MisbehaveNodeClass".into(),
            name: "default".into(),
        },
    );
    let node_class = karpenter_runtime::wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    };
    (pool, node_class)
}

fn cached_files(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for sub in std::fs::read_dir(dir).expect("cache root") {
        for file in std::fs::read_dir(sub.expect("entry").path()).expect("engine dir") {
            names.push(
                file.expect("file")
                    .file_name()
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    names
}

#[tokio::test]
async fn a_plugin_compiled_in_a_child_process_serves_and_is_cached_for_the_next_start() {
    let cache = tempfile::tempdir().expect("tmp");
    let kwok = common::plugin_wasm("kwok");

    let plugin = runtime(cache.path(), karpenter())
        .load("kwok", &kwok, PluginConfig::default())
        .await
        .expect("compiled in the child");
    assert_eq!(plugin.metadata.name, "kwok");
    assert_eq!(plugin.metadata.node_classes[0].kind, "KWOKNodeClass");
    let files = cached_files(cache.path());
    assert_eq!(files, vec![format!("{}.cwasm", plugin.sha256)]);

    // The next start finds it: a compiler that cannot even start is not needed.
    let missing = Compiler::Child(cache.path().join("no-such-karpenter"));
    let again = runtime(cache.path(), missing)
        .load("kwok", &kwok, PluginConfig::default())
        .await
        .expect("loaded from the cache");
    assert_eq!(again.metadata.name, "kwok");
}

#[tokio::test]
async fn a_plugin_that_does_not_compile_is_refused_with_the_compilers_message() {
    let not_wasm = b"#!/bin/sh\necho not a component\n";
    let cache = tempfile::tempdir().expect("tmp");
    let in_child = runtime(cache.path(), karpenter())
        .load("broken", not_wasm, PluginConfig::default())
        .await
        .err()
        .expect("refused");
    let in_process = runtime(cache.path(), Compiler::InProcess)
        .load("broken", not_wasm, PluginConfig::default())
        .await
        .err()
        .expect("refused");

    let child_message = format!("{in_child:#}");
    let cause = format!("{:#}", in_process.root_cause());
    assert!(
        child_message.starts_with("plugin broken: not a valid WebAssembly component"),
        "{child_message}"
    );
    assert!(
        child_message.contains(&cause),
        "the child's message {child_message:?} carries the compiler's {cause:?}"
    );
    assert!(cached_files(cache.path()).is_empty(), "nothing cached");
}

#[tokio::test]
async fn a_compiler_that_cannot_start_is_named_in_the_error() {
    let cache = tempfile::tempdir().expect("tmp");
    let missing = cache.path().join("no-such-karpenter");
    let err = runtime(cache.path(), Compiler::Child(missing.clone()))
        .load(
            "kwok",
            &common::plugin_wasm("kwok"),
            PluginConfig::default(),
        )
        .await
        .err()
        .expect("refused");
    let message = format!("{err:#}");
    assert!(
        message.contains(&format!("starting the compiler {}", missing.display())),
        "{message}"
    );
}

/// The path of a cached file, under the subdirectory of the engine that
/// compiled it.
fn cached_path(dir: &std::path::Path, file: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .expect("cache root")
        .map(|sub| sub.expect("entry").path().join(file))
        .find(|path| path.exists())
        .expect("cached")
}

#[tokio::test]
async fn a_cache_file_is_trusted_for_its_contents_never_its_name() {
    let cache = tempfile::tempdir().expect("tmp");
    let (kwok, misbehave) = (
        common::plugin_wasm("kwok"),
        common::plugin_wasm("misbehave"),
    );
    let rt = runtime(cache.path(), Compiler::InProcess);
    let k = rt
        .load("kwok", &kwok, PluginConfig::default())
        .await
        .expect("kwok");
    let m = rt
        .load("misbehave", &misbehave, PluginConfig::default())
        .await
        .expect("misbehave");
    let (kwok_file, misbehave_file) = (
        cached_path(cache.path(), &format!("{}.cwasm", k.sha256)),
        cached_path(cache.path(), &format!("{}.cwasm", m.sha256)),
    );

    // Another plugin's machine code under misbehave's name.
    std::fs::copy(&kwok_file, &misbehave_file).expect("copy");
    let loaded = runtime(cache.path(), Compiler::InProcess)
        .load("misbehave", &misbehave, PluginConfig::default())
        .await
        .expect("compiled again");
    assert_eq!(loaded.metadata.name, "misbehave", "never kwok's code");

    // Damaged machine code: flipped bytes in the middle, then a truncation.
    let mut bytes = std::fs::read(&misbehave_file).expect("read");
    let middle = bytes.len() / 2;
    for b in &mut bytes[middle..middle + 4096] {
        *b ^= 0xff;
    }
    std::fs::write(&misbehave_file, &bytes).expect("damage");
    let loaded = runtime(cache.path(), Compiler::InProcess)
        .load("misbehave", &misbehave, PluginConfig::default())
        .await
        .expect("compiled again");
    assert!(loaded.repair_policies().await.expect("answers").is_empty());
    let whole = std::fs::read(&misbehave_file).expect("read");
    std::fs::write(&misbehave_file, &whole[..whole.len() / 3]).expect("truncate");
    let loaded = runtime(cache.path(), Compiler::InProcess)
        .load("misbehave", &misbehave, PluginConfig::default())
        .await
        .expect("compiled again");
    assert_eq!(loaded.metadata.name, "misbehave");
    // The file was rewritten whole.
    assert_eq!(std::fs::read(&misbehave_file).expect("read"), whole);
}

/// A large plugin not in the cache serves on Winch's quick compile (made by
/// the child with `--quick`) at once, and moves onto Cranelift's code when
/// the background compile lands in the cache; the next start loads that.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_plugin_starts_on_its_quick_compile_and_is_optimized_behind_it() {
    let cache = tempfile::tempdir().expect("tmp");
    let python = common::plugin_wasm("inventory");
    let config = || {
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/plugins/inventory/inventory.yaml");
        PluginConfig::from_yaml(&std::fs::read_to_string(example).expect("example yaml"))
            .expect("config")
    };

    let start = std::time::Instant::now();
    let plugin = runtime(cache.path(), karpenter())
        .load("inventory", &python, config())
        .await
        .expect("quick compile");
    let quick = start.elapsed();
    assert!(!plugin.optimized(), "served before Cranelift finished");
    let node_class = karpenter_runtime::wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    };
    let status = plugin
        .validate_node_class(&node_class)
        .await
        .expect("a call on the quick code");
    assert_eq!(status.conditions[0].reason, "Ready");

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    while !plugin.optimized() {
        assert!(std::time::Instant::now() < deadline, "never optimized");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let optimized = start.elapsed();
    plugin
        .validate_node_class(&node_class)
        .await
        .expect("a call on the optimized code");
    assert_eq!(
        cached_files(cache.path()),
        vec![format!("{}.cwasm", plugin.sha256); 2],
        "Winch's code and Cranelift's, each in its engine's directory"
    );

    let again = runtime(cache.path(), karpenter())
        .load("inventory", &python, config())
        .await
        .expect("from the cache");
    assert!(again.optimized(), "a cached plugin starts optimized");
    eprintln!(
        "inventory ({} bytes): serving after {:.2} s on the quick compile, optimized after {:.2} s",
        python.len(),
        quick.as_secs_f64(),
        optimized.as_secs_f64()
    );
}

/// kwok with what Winch cannot compile: a core module (never instantiated,
/// but compiled with the rest) whose function makes a tail call, a proposal
/// Cranelift takes and Winch lacks, and a custom section that brings the
/// component past the quick-start size.
fn large_with_a_tail_call(kwok: &[u8]) -> Vec<u8> {
    let leb = |mut n: usize, out: &mut Vec<u8>| loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    // (module (func (param i32) (result i32) local.get 0 return_call 0))
    let module: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
        0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // type: (i32) -> i32
        0x03, 0x02, 0x01, 0x00, // one function of type 0
        0x0a, 0x08, 0x01, 0x06, 0x00, 0x20, 0x00, 0x12, 0x00, 0x0b, // return_call 0
    ];
    let mut wasm = kwok.to_vec();
    wasm.push(0x01); // a component's core module section
    leb(module.len(), &mut wasm);
    wasm.extend_from_slice(module);
    let name = b"padding";
    let padding = vec![0x5a; 5 << 20];
    wasm.push(0x00); // a custom section
    leb(1 + name.len() + padding.len(), &mut wasm);
    wasm.push(name.len() as u8);
    wasm.extend_from_slice(name);
    wasm.extend_from_slice(&padding);
    wasm
}

/// A large plugin Winch refuses (a proposal it lacks) is not refused: it
/// waits for Cranelift's compile, serves on it, and lands in the cache.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_plugin_winch_refuses_waits_for_cranelift_and_serves() {
    let cache = tempfile::tempdir().expect("tmp");
    let wasm = large_with_a_tail_call(&common::plugin_wasm("kwok"));
    assert!(wasm.len() > 5 << 20);
    let plugin = runtime(cache.path(), karpenter())
        .load("kwok", &wasm, PluginConfig::default())
        .await
        .expect("Cranelift compiles what Winch refuses");
    assert!(plugin.optimized(), "on Cranelift's code from the start");
    assert_eq!(plugin.metadata.name, "kwok");
    assert_eq!(
        cached_files(cache.path()),
        vec![format!("{}.cwasm", plugin.sha256)]
    );
}

/// A small plugin not in the cache serves on Winch's code, cached for the
/// next start, and is compiled with Cranelift only once its calls have used
/// the CPU that compile would cost: a plugin that stays cold never pays it.
#[tokio::test(flavor = "multi_thread")]
async fn a_small_plugin_serves_on_its_quick_compile_until_its_calls_make_it_hot() {
    let cache = tempfile::tempdir().expect("tmp");
    let misbehave = common::plugin_wasm("misbehave");
    let config = |mode: &str| PluginConfig {
        settings: std::collections::BTreeMap::from([("MODE".to_string(), mode.to_string())]),
        ..PluginConfig::default()
    };
    let cold = runtime(cache.path(), karpenter())
        .load("cold", &misbehave, config("healthy"))
        .await
        .expect("quick compile");
    assert!(!cold.optimized(), "on Winch's code");
    for _ in 0..100 {
        cold.repair_policies()
            .await
            .expect("a call on the quick code");
    }
    assert!(!cold.optimized(), "cheap calls leave it on Winch's code");
    assert_eq!(
        cached_files(cache.path()),
        vec![format!("{}.cwasm", cold.sha256)],
        "Winch's code cached, no Cranelift compile"
    );

    // A call that spins until its CPU budget ends has used more than the
    // tier-up's CPU.
    let spinning = PluginConfig {
        cpu_ms: (karpenter_runtime::TIER_UP_CPU * 2).as_millis() as u64,
        ..config("loop")
    };
    let no_compiler = Compiler::Child(cache.path().join("no-compiler"));
    let hot = runtime(cache.path(), no_compiler)
        .load("hot", &misbehave, spinning.clone())
        .await
        .expect("Winch's code from the cache: no compiler needed");
    assert!(!hot.optimized());
    let (pool, node_class) = misbehave_class();
    let spun = hot.get_instance_types(&pool, &node_class).await;
    assert!(format!("{:?}", spun.err()).contains("CPU budget"));
    // Its optimized compile needs a compiler, which this runtime lacks: the
    // attempt is logged and the plugin keeps serving on Winch's code.
    hot.repair_policies().await.expect("still serving");
    assert!(!hot.optimized());

    let compiling = runtime(cache.path(), karpenter())
        .load("hot", &misbehave, spinning)
        .await
        .expect("loaded");
    let spun = compiling.get_instance_types(&pool, &node_class).await;
    assert!(spun.is_err());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !compiling.optimized() {
        assert!(std::time::Instant::now() < deadline, "never optimized");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        cached_files(cache.path()).len(),
        2,
        "Cranelift's code cached"
    );
}

/// A call that waits (for its HTTP, or here a sleep) is not charged the
/// wait as CPU on the quick code: waiting calls never make a plugin hot.
#[tokio::test]
async fn calls_that_wait_do_not_make_a_plugin_hot() {
    use futures::StreamExt;
    let cache = tempfile::tempdir().expect("tmp");
    let misbehave = common::plugin_wasm("misbehave");
    let config = PluginConfig {
        settings: std::collections::BTreeMap::from([("MODE".to_string(), "sleep".to_string())]),
        max_instances: 8,
        ..PluginConfig::default()
    };
    let waiting = runtime(cache.path(), karpenter())
        .load("waiting", &misbehave, config)
        .await
        .expect("quick compile");
    assert!(!waiting.optimized());
    let (pool, node_class) = misbehave_class();
    // The tier-up comes after 200 ticks of 5 ms. Each call sleeps 100 ms:
    // charged a tick per wait, these calls would pass 200 by a fifth.
    let calls = (karpenter_runtime::TIER_UP_CPU.as_millis() / 5 * 6 / 5) as usize;
    let failed = futures::stream::iter(0..calls)
        .map(|_| waiting.get_instance_types(&pool, &node_class))
        .buffer_unordered(8)
        .filter(|r| std::future::ready(r.is_err()))
        .count()
        .await;
    assert_eq!(failed, 0, "every sleeping call answered");
    // Long enough for an optimized compile, had one started.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert!(!waiting.optimized(), "still on Winch's code");
    assert_eq!(
        cached_files(cache.path()),
        vec![format!("{}.cwasm", waiting.sha256)],
        "no Cranelift compile"
    );
}
