//! Helpers shared by the host's integration tests.
#![allow(dead_code)]

pub mod arm;
pub mod cluster;
pub mod https;
pub mod nebius;

use std::path::PathBuf;

/// A built plugin's path: one of this workspace's, which the test build
/// builds, or one in another language (`target/plugins/<name>.wasm`, from
/// `make js-plugins`).
pub fn plugin_path(name: &str) -> PathBuf {
    karpenter_test_plugins::path(name).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../target/plugins/{name}.wasm"))
    })
}

pub fn plugin_wasm(name: &str) -> Vec<u8> {
    let path = plugin_path(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "plugin {name}: {}: {e} (plugins in other languages come from `make js-plugins`)",
            path.display()
        )
    })
}

/// A runtime whose precompiled cache is shared by the tests of this run, so
/// each plugin is compiled once.
pub fn runtime() -> std::sync::Arc<karpenter_runtime::Runtime> {
    runtime_with(karpenter_runtime::RuntimeOptions::default())
}

pub fn runtime_with(
    mut options: karpenter_runtime::RuntimeOptions,
) -> std::sync::Arc<karpenter_runtime::Runtime> {
    let dir =
        std::env::temp_dir().join(format!("karpenter-test-precompiled-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cache dir");
    options.precompiled = Some(
        cap_std::fs::Dir::open_ambient_dir(&dir, cap_std::ambient_authority())
            .expect("open cache dir"),
    );
    karpenter_runtime::Runtime::new(options).expect("runtime")
}

/// The kubelet bootstrap token's Secret as the chart mounts it, which the
/// cloud plugins' `secretSettings` name.
pub fn bootstrap_token_secret() -> (String, Vec<u8>) {
    (
        "kubelet-bootstrap-token/token".into(),
        b"abcdef.0123456789abcdef\n".to_vec(),
    )
}
