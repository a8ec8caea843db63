//! The providers that `simulate` and `explain` ask for instance types: the
//! plugins in a directory the user names, else the ones built into the
//! binary, so a copied or installed `karpenter` plans with no checkout.

use super::files;
use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use karpenter_runtime::{Registry, Runtime, RuntimeOptions, SourceRoots};
use std::path::Path;
use std::sync::Arc;

/// The built-in providers' names, for messages: `kwok, azure, nebius`.
pub fn built_in() -> String {
    karpenter_plugin_bundle::PROVIDERS
        .map(|(name, _)| name)
        .join(", ")
}

pub async fn open(dir: Option<&Path>) -> anyhow::Result<Arc<Registry>> {
    let runtime = Runtime::new(RuntimeOptions {
        precompiled: files::precompiled_dir(),
        ..RuntimeOptions::default()
    })?;
    let Some(path) = dir else {
        return Registry::fixed(runtime, &karpenter_plugin_bundle::PROVIDERS).await;
    };
    let dir = Dir::open_ambient_dir(path, ambient_authority()).with_context(|| {
        format!(
            "opening the plugin directory {}: name a directory of <name>.wasm files, or leave the flag out to use the built-in providers ({})",
            path.display(),
            built_in()
        )
    })?;
    // A directory rendered from the chart names the bundled providers by
    // `source: {builtin: ...}`.
    Registry::open_with(
        runtime,
        dir,
        SourceRoots {
            volume: None,
            builtin: &karpenter_plugin_bundle::PROVIDERS,
            pulled: super::files::pulled_dir(super::files::precompiled_dir().as_ref()),
        },
    )
    .await
}
