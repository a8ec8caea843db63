//! The workspace's plugins for tests to load: the cloud providers (`kwok`,
//! `azure`, `nebius`, built by `karpenter-plugin-bundle`) and the test
//! plugins that misbehave on purpose (`misbehave`, `broken`, built by this
//! crate's build script).

use std::path::{Path, PathBuf};

/// The providers, each as `<name>.wasm`: a directory a registry can open.
pub fn providers() -> &'static Path {
    karpenter_plugin_bundle::dir()
}

/// The plugins that misbehave on purpose.
pub fn test_plugins() -> &'static Path {
    Path::new(concat!(env!("OUT_DIR"), "/test-plugins"))
}

/// `<name>.wasm`, a provider or a test plugin; `None` if this build makes no
/// plugin of that name.
pub fn path(name: &str) -> Option<PathBuf> {
    [providers(), test_plugins()]
        .iter()
        .map(|d| d.join(format!("{name}.wasm")))
        .find(|p| p.is_file())
}
