//! The set of loaded plugins, read from one directory and kept in step with
//! it: in production a mounted ConfigMap, where kubelet swaps the `..data`
//! symlink to update every file at once.
//!
//! A plugin is `<name>.wasm` plus an optional `<name>.yaml` configuration.
//! Replacing either swaps the plugin; calls already running finish on the old
//! one (they hold it). A plugin that fails to load is reported and the one
//! loaded before it, if any, stays in service.

use super::config::PluginConfig;
use super::plugin::Plugin;
use super::runtime::Runtime;
use anyhow::Context;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

pub struct Registry {
    runtime: Arc<Runtime>,
    dir: Dir,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    plugins: BTreeMap<String, Loaded>,
    /// Plugin name to why its current files could not be loaded.
    failures: BTreeMap<String, String>,
    /// Files already seen, to skip unchanged ones without reading them.
    seen: BTreeMap<String, Stamp>,
}

struct Loaded {
    plugin: Arc<Plugin>,
    digest: String,
}

/// Size and modification time of a plugin's files; a change means re-read.
type Stamp = Vec<(u64, Option<SystemTime>)>;

/// What one pass over the directory did.
#[derive(Debug, Default, PartialEq)]
pub struct ReloadReport {
    pub loaded: Vec<String>,
    pub removed: Vec<String>,
    pub failed: Vec<(String, String)>,
}

impl Registry {
    pub async fn open(runtime: Arc<Runtime>, dir: Dir) -> anyhow::Result<Arc<Self>> {
        let registry = Arc::new(Registry {
            runtime,
            dir,
            state: RwLock::default(),
        });
        let report = registry.reload().await?;
        for (name, why) in &report.failed {
            tracing::error!(plugin = %name, error = %why, "plugin not loaded");
        }
        Ok(registry)
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.read().plugins.get(name).map(|l| l.plugin.clone())
    }

    /// The plugin serving NodeClasses of this group and kind.
    pub fn for_node_class(&self, group: &str, kind: &str) -> Option<Arc<Plugin>> {
        self.read()
            .plugins
            .values()
            .map(|l| &l.plugin)
            .find(|p| p.serves(group, kind))
            .cloned()
    }

    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.read()
            .plugins
            .values()
            .map(|l| l.plugin.clone())
            .collect()
    }

    pub fn failures(&self) -> BTreeMap<String, String> {
        self.read().failures.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// One pass: load new and changed plugins, drop removed ones.
    pub async fn reload(&self) -> anyhow::Result<ReloadReport> {
        let names = self.plugin_names()?;
        let mut report = ReloadReport::default();
        for name in &names {
            let stamp = self.stamp(name);
            if self.read().seen.get(name) == Some(&stamp) {
                continue;
            }
            match self.load(name).await {
                Ok(None) => {}
                Ok(Some(loaded)) => {
                    tracing::info!(plugin = %name, sha256 = %loaded.plugin.sha256, version = %loaded.plugin.contract_version, "plugin loaded");
                    let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                    state.plugins.insert(name.clone(), loaded);
                    state.failures.remove(name);
                    report.loaded.push(name.clone());
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::error!(plugin = %name, error = %why, "plugin failed to load; keeping the previous version, if any");
                    self.state
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .failures
                        .insert(name.clone(), why.clone());
                    report.failed.push((name.clone(), why));
                }
            }
            self.state
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .seen
                .insert(name.clone(), stamp);
        }
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = state
            .plugins
            .keys()
            .filter(|n| !names.contains(n))
            .cloned()
            .collect();
        for name in gone {
            tracing::info!(plugin = %name, "plugin removed");
            state.plugins.remove(&name);
            report.removed.push(name);
        }
        state.seen.retain(|n, _| names.contains(n));
        state.failures.retain(|n, _| names.contains(n));
        Ok(report)
    }

    /// Re-reads the directory every `interval` until the registry is dropped.
    pub fn watch(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(registry) = weak.upgrade() else {
                    return;
                };
                if let Err(e) = registry.reload().await {
                    tracing::error!(error = %format!("{e:#}"), "cannot read the plugin directory");
                }
            }
        })
    }

    fn plugin_names(&self) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in self.dir.entries().context("listing the plugin directory")? {
            let file = entry?.file_name();
            let file = file.to_string_lossy();
            // Skip kubelet's `..data` and `..<timestamp>` entries and dotfiles.
            if file.starts_with('.') {
                continue;
            }
            if let Some(name) = file.strip_suffix(".wasm") {
                names.push(name.to_string());
            }
        }
        names.sort();
        Ok(names)
    }

    fn stamp(&self, name: &str) -> Stamp {
        [format!("{name}.wasm"), format!("{name}.yaml")]
            .iter()
            .map(|f| match self.dir.metadata(f) {
                Ok(m) => (m.len(), m.modified().ok().map(|t| t.into_std())),
                Err(_) => (0, None),
            })
            .collect()
    }

    /// Loads `name` unless its contents are what is loaded already.
    async fn load(&self, name: &str) -> anyhow::Result<Option<Loaded>> {
        let wasm = self
            .dir
            .read(format!("{name}.wasm"))
            .with_context(|| format!("reading {name}.wasm"))?;
        let config_text = match self.dir.read_to_string(format!("{name}.yaml")) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {name}.yaml")),
        };
        let mut h = Sha256::new();
        h.update(&wasm);
        h.update(config_text.as_deref().unwrap_or_default());
        let digest = hex::encode(h.finalize());
        if self
            .read()
            .plugins
            .get(name)
            .is_some_and(|l| l.digest == digest)
        {
            return Ok(None);
        }
        let config = match &config_text {
            Some(text) => PluginConfig::from_yaml(text).with_context(|| format!("{name}.yaml"))?,
            None => PluginConfig::default(),
        };
        let plugin = self.runtime.load(name, &wasm, config).await?;
        Ok(Some(Loaded {
            plugin: Arc::new(plugin),
            digest,
        }))
    }
}
