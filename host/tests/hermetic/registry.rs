//! Plugins load from a directory laid out like a mounted ConfigMap, and a
//! kubelet-style `..data` symlink swap replaces them in the running host.

use crate::common;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use karpenter_runtime::Registry;
use karpenter_runtime::ReloadReport;
use std::os::unix::fs::symlink;
use std::path::Path;

/// Writes `files` into a new timestamped directory and points `..data` at it,
/// the way kubelet updates a ConfigMap volume: the swap is one rename.
fn publish(root: &Path, version: &str, files: &[(&str, &[u8])]) {
    let dir = root.join(format!("..{version}"));
    std::fs::create_dir(&dir).expect("version dir");
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).expect("write");
        let link = root.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(name), &link).expect("file symlink");
        }
    }
    let tmp = root.join("..data_tmp");
    symlink(format!("..{version}"), &tmp).expect("data symlink");
    std::fs::rename(&tmp, root.join("..data")).expect("swap");
}

#[tokio::test]
async fn a_configmap_update_swaps_the_plugin_and_keeps_in_flight_calls_working() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kwok = common::plugin_wasm("kwok");
    let misbehave = common::plugin_wasm("misbehave");
    publish(
        tmp.path(),
        "2026_11_30_01",
        &[("cloud.wasm", &kwok), ("cloud.yaml", b"memoryMib: 64\n")],
    );

    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).expect("open");
    let registry = Registry::open(common::runtime(), dir)
        .await
        .expect("registry");
    let before = registry.get("cloud").expect("loaded");
    assert_eq!(before.metadata.name, "kwok");
    assert!(
        registry
            .for_node_class("karpenter.kwok.sh", "KWOKNodeClass")
            .is_some()
    );

    // Nothing changed: nothing reloads.
    assert_eq!(
        registry.reload().await.expect("reload"),
        ReloadReport::default()
    );

    publish(
        tmp.path(),
        "2026_11_30_02",
        &[
            ("cloud.wasm", &misbehave),
            ("cloud.yaml", b"memoryMib: 64\n"),
        ],
    );
    let report = registry.reload().await.expect("reload");
    assert_eq!(report.loaded, vec!["cloud".to_string()]);
    let after = registry.get("cloud").expect("still loaded");
    assert_eq!(after.metadata.name, "misbehave");
    assert!(
        registry
            .for_node_class("karpenter.kwok.sh", "KWOKNodeClass")
            .is_none()
    );
    // A caller holding the old plugin still gets answers from it.
    assert_eq!(
        before
            .repair_policies()
            .await
            .expect("old plugin still answers")
            .len(),
        1
    );
}

#[tokio::test]
async fn a_broken_update_keeps_the_previous_plugin_and_reports_why() {
    let tmp = tempfile::tempdir().expect("tempdir");
    publish(
        tmp.path(),
        "v1",
        &[("cloud.wasm", &common::plugin_wasm("kwok"))],
    );
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).expect("open");
    let registry = Registry::open(common::runtime(), dir)
        .await
        .expect("registry");

    publish(tmp.path(), "v2", &[("cloud.wasm", b"not wasm at all")]);
    let report = registry.reload().await.expect("reload");
    assert_eq!(report.failed.len(), 1);
    assert!(
        registry.failures()["cloud"].contains("plugin cloud"),
        "{:?}",
        registry.failures()
    );
    assert_eq!(
        registry.get("cloud").expect("previous kept").metadata.name,
        "kwok"
    );

    // An invalid configuration is refused the same way, naming the file.
    publish(
        tmp.path(),
        "v3",
        &[
            ("cloud.wasm", &common::plugin_wasm("kwok")),
            ("cloud.yaml", b"allowedHosts: [\"*\"]\n"),
        ],
    );
    registry.reload().await.expect("reload");
    let why = &registry.failures()["cloud"];
    assert!(why.contains("cloud.yaml") && why.contains("bare"), "{why}");
}

#[tokio::test]
async fn removing_a_plugin_unloads_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("a.wasm"), common::plugin_wasm("kwok")).expect("write");
    std::fs::write(tmp.path().join("b.wasm"), common::plugin_wasm("misbehave")).expect("write");
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).expect("open");
    let registry = Registry::open(common::runtime(), dir)
        .await
        .expect("registry");
    assert_eq!(registry.plugins().len(), 2);
    std::fs::remove_file(tmp.path().join("b.wasm")).expect("remove");
    let report = registry.reload().await.expect("reload");
    assert_eq!(report.removed, vec!["b".to_string()]);
    assert!(registry.get("b").is_none());
}

#[tokio::test]
async fn a_zstd_compressed_plugin_loads_and_a_corrupt_one_is_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kwok = common::plugin_wasm("kwok");
    let compressed = zstd::encode_all(&kwok[..], 19).expect("compress");
    assert!(compressed.len() * 2 < kwok.len(), "worth compressing");
    publish(
        tmp.path(),
        "2026_11_30_01",
        &[
            ("cloud.wasm.zst", &compressed),
            ("broken.wasm.zst", b"not zstd"),
        ],
    );
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).expect("open");
    let registry = Registry::open(common::runtime(), dir)
        .await
        .expect("registry");
    let cloud = registry.get("cloud").expect("loaded from cloud.wasm.zst");
    assert_eq!(cloud.metadata.name, "kwok");
    let failures = registry.failures();
    assert!(
        failures["broken"].contains("decompressing broken.wasm.zst"),
        "{failures:?}"
    );
}

#[tokio::test]
async fn a_second_plugin_claiming_the_same_provider_id_scheme_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kwok = common::plugin_wasm("kwok");
    std::fs::write(tmp.path().join("a-kwok.wasm"), &kwok).expect("write");
    std::fs::write(tmp.path().join("b-impostor.wasm"), &kwok).expect("write");
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).expect("open");
    let registry = Registry::open(common::runtime(), dir)
        .await
        .expect("registry");
    assert!(registry.get("a-kwok").is_some());
    assert!(registry.get("b-impostor").is_none(), "refused");
    let why = &registry.failures()["b-impostor"];
    assert!(
        why.contains("providerID scheme \"kwok\" is already served by plugin a-kwok"),
        "{why}"
    );
    // The first keeps serving its NodeClasses.
    let serving = registry
        .for_node_class("karpenter.kwok.sh", "KWOKNodeClass")
        .expect("served");
    assert!(std::sync::Arc::ptr_eq(
        &serving,
        &registry.get("a-kwok").expect("a-kwok")
    ));
}
