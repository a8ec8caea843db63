//! Plugins whose WebAssembly is not in the plugin directory: the registry
//! loads them from the providers built into the binary, a mounted volume or
//! an HTTPS URL pinned by sha256, and refuses bytes whose digest is not the
//! pinned one before compiling anything.

use crate::common;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use common::https::FileServer;
use karpenter_runtime::{Registry, RuntimeOptions, SourceRoots};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn open(path: &std::path::Path) -> Dir {
    Dir::open_ambient_dir(path, ambient_authority()).expect("open dir")
}

#[tokio::test]
async fn a_pinned_https_url_loads_and_a_wrong_digest_is_refused_before_compiling() {
    let wasm = common::plugin_wasm("broken");
    let garbage = b"not a component at all".to_vec();
    let server = FileServer::start(BTreeMap::from([
        ("/broken.wasm".to_string(), wasm.clone()),
        ("/garbage.wasm".to_string(), garbage.clone()),
    ]))
    .await;
    let plugins = tempfile::tempdir().expect("tmp");
    let write =
        |name: &str, text: String| std::fs::write(plugins.path().join(name), text).expect("write");
    write(
        "cloud.yaml",
        format!(
            "source:\n  url: {}/broken.wasm\n  sha256: {}\nsettings: {{MODE: ok}}\n",
            server.base,
            sha256(&wasm)
        ),
    );
    // The digest of the real plugin pinned, garbage served: the mismatch is
    // what is reported, not that the bytes do not compile.
    let pinned = sha256(&wasm);
    write(
        "swapped.yaml",
        format!(
            "source:\n  url: {}/garbage.wasm\n  sha256: {pinned}\n",
            server.base
        ),
    );
    // A ConfigMap key that is not a plugin is left alone.
    write("notes.yaml", "hello: world\n".into());

    let runtime = common::runtime_with(RuntimeOptions {
        extra_roots: vec![server.ca_pem.clone().into_bytes()],
        ..RuntimeOptions::default()
    });
    let registry = Registry::open(runtime, open(plugins.path()))
        .await
        .expect("registry");
    let cloud = registry.get("cloud").expect("loaded from the URL");
    assert_eq!(cloud.metadata.name, "broken");
    assert_eq!(cloud.sha256, pinned);

    let failures = registry.failures();
    let why = &failures["swapped"];
    let served = sha256(&garbage);
    assert!(
        why.contains(&format!("{}/garbage.wasm has sha256 {served}", server.base))
            && why.contains(&format!("pins sha256 {pinned}"))
            && why.contains("refusing to load it"),
        "{why}"
    );
    assert!(!why.contains("not a valid WebAssembly component"), "{why}");
    assert!(registry.get("notes").is_none() && !failures.contains_key("notes"));
    assert_eq!(failures.len(), 1, "{failures:?}");
}

#[tokio::test]
async fn a_server_the_host_does_not_trust_is_refused() {
    let wasm = common::plugin_wasm("broken");
    let server =
        FileServer::start(BTreeMap::from([("/broken.wasm".to_string(), wasm.clone())])).await;
    let plugins = tempfile::tempdir().expect("tmp");
    std::fs::write(
        plugins.path().join("cloud.yaml"),
        format!(
            "source:\n  url: {}/broken.wasm\n  sha256: {}\n",
            server.base,
            sha256(&wasm)
        ),
    )
    .expect("write");
    let registry = Registry::open(common::runtime(), open(plugins.path()))
        .await
        .expect("registry");
    assert!(registry.get("cloud").is_none());
    let why = &registry.failures()["cloud"];
    assert!(why.contains("downloading https://127.0.0.1:"), "{why}");
    assert!(
        server.requests.lock().expect("lock").is_empty(),
        "no request got through"
    );
}

#[tokio::test]
async fn a_volume_file_loads_and_is_reloaded_when_it_changes() {
    let volume = tempfile::tempdir().expect("tmp");
    std::fs::create_dir(volume.path().join("v1")).expect("mkdir");
    std::fs::write(
        volume.path().join("v1/cloud.wasm"),
        common::plugin_wasm("broken"),
    )
    .expect("write");
    let plugins = tempfile::tempdir().expect("tmp");
    std::fs::write(
        plugins.path().join("cloud.yaml"),
        "source: {volume: v1/cloud.wasm}\n",
    )
    .expect("write");
    let registry = Registry::open_with(
        common::runtime(),
        open(plugins.path()),
        SourceRoots {
            volume: Some(open(volume.path())),
            ..SourceRoots::default()
        },
    )
    .await
    .expect("registry");
    assert_eq!(
        registry.get("cloud").expect("loaded").metadata.name,
        "broken"
    );

    // A new image with another plugin under the same path.
    std::fs::write(
        volume.path().join("v1/cloud.wasm"),
        common::plugin_wasm("misbehave"),
    )
    .expect("write");
    let report = registry.reload().await.expect("reload");
    assert_eq!(report.loaded, ["cloud"]);
    assert_eq!(
        registry.get("cloud").expect("loaded").metadata.name,
        "misbehave"
    );

    // Pinned to another digest: refused, and the loaded one stays.
    std::fs::write(
        plugins.path().join("cloud.yaml"),
        format!(
            "source: {{volume: v1/cloud.wasm, sha256: {}}}\n",
            "0".repeat(64)
        ),
    )
    .expect("write");
    let report = registry.reload().await.expect("reload");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(
        report.failed[0]
            .1
            .contains("volume file v1/cloud.wasm has sha256"),
        "{report:?}"
    );
    assert_eq!(
        registry.get("cloud").expect("kept").metadata.name,
        "misbehave"
    );
}

#[tokio::test]
async fn a_built_in_provider_loads_by_name_and_an_unknown_name_says_what_there_is() {
    let plugins = tempfile::tempdir().expect("tmp");
    let write = |name: &str, text: &str| {
        std::fs::write(plugins.path().join(name), text).expect("write");
    };
    write("cloud.yaml", "source: {builtin: kwok}\n");
    write("typo.yaml", "source: {builtin: kwokk}\n");
    let wrong = "0".repeat(64);
    write(
        "pinned.yaml",
        &format!("source: {{builtin: kwok, sha256: \"{wrong}\"}}\n"),
    );
    let registry = Registry::open_with(
        common::runtime(),
        open(plugins.path()),
        SourceRoots {
            builtin: &karpenter_plugin_bundle::PROVIDERS,
            ..SourceRoots::default()
        },
    )
    .await
    .expect("registry");
    let cloud = registry.get("cloud").expect("the built-in kwok provider");
    assert_eq!(cloud.metadata.name, "kwok");
    let kwok = karpenter_plugin_bundle::PROVIDERS
        .iter()
        .find(|(n, _)| *n == "kwok")
        .expect("kwok is built in")
        .1;
    assert_eq!(cloud.sha256, sha256(kwok));
    let failures = registry.failures();
    assert!(
        failures["typo"].contains("no built-in plugin of that name (it has: kwok, azure, nebius)"),
        "{}",
        failures["typo"]
    );
    assert!(
        failures["pinned"].contains("built-in plugin kwok has sha256")
            && failures["pinned"].contains(&wrong),
        "{}",
        failures["pinned"]
    );
}
