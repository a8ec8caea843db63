//! The set of loaded plugins, read from one directory and kept in step with
//! it: in production a mounted ConfigMap, where kubelet swaps the `..data`
//! symlink to update every file at once. (`Registry::fixed` holds plugins
//! given as bytes instead, with no directory behind them.)
//!
//! A plugin is `<name>.wasm` (or `<name>.wasm.zst`, zstd-compressed: a third
//! of the size, for ConfigMaps and Helm releases, which hold 1 MiB each) plus
//! an optional `<name>.yaml` configuration.
//! Replacing either swaps the plugin; calls already running finish on the old
//! one (they hold it). A plugin that fails to load is reported and the one
//! loaded before it, if any, stays in service.
//!
//! A plugin whose WebAssembly is elsewhere has only its `<name>.yaml` there,
//! whose `source` names a provider built into the binary, an OCI artifact
//! pinned by digest, a file on the plugin volume or an HTTPS URL pinned by
//! sha256 (see `source.rs`).

use super::config::PluginConfig;
use super::oci::PullCache;
use super::plugin::Plugin;
use super::runtime::Runtime;
use super::source::{Source, SourceRoots, Sources};
use anyhow::Context;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

pub struct Registry {
    runtime: Arc<Runtime>,
    /// None for a fixed set of plugins, which nothing reloads.
    dir: Option<Dir>,
    sources: Sources,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    plugins: BTreeMap<String, Loaded>,
    /// Plugin name to why its current files could not be loaded.
    failures: BTreeMap<String, String>,
    /// Files already seen, to skip unchanged ones without reading them.
    seen: BTreeMap<String, Stamp>,
    /// Plugins from a URL or registry that failed to load, and when to try again: a
    /// server that was down at start must not need a restart.
    retry_at: BTreeMap<String, Instant>,
}

/// How long a plugin whose download failed waits before the next try.
const SOURCE_RETRY: Duration = Duration::from_secs(60);

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
        Self::open_with(runtime, dir, SourceRoots::default()).await
    }

    /// As `open`, with the volume and built-in plugins that `source`
    /// entries may name.
    pub async fn open_with(
        runtime: Arc<Runtime>,
        dir: Dir,
        roots: SourceRoots,
    ) -> anyhow::Result<Arc<Self>> {
        let registry = Self::unloaded(runtime, dir, roots);
        registry.reload().await?;
        Ok(registry)
    }

    /// A registry that has loaded nothing yet: the first `reload` loads the
    /// directory. The controller serves its health endpoints meanwhile, so
    /// plugins that take long to compile never outlast a startup probe.
    pub fn unloaded(runtime: Arc<Runtime>, dir: Dir, roots: SourceRoots) -> Arc<Self> {
        let sources = Sources {
            volume: roots.volume.map(Arc::new),
            client: Some(runtime.http.client()),
            builtin: roots.builtin,
            registries: Some(runtime.registries.clone()),
            secrets: Some(runtime.secrets.clone()),
            pulled: roots.pulled.map(|dir| Arc::new(PullCache::new(dir))),
        };
        Arc::new(Registry {
            runtime,
            dir: Some(dir),
            sources,
            state: RwLock::default(),
        })
    }

    /// These plugins, loaded once: no directory stands behind them, so
    /// `reload` changes nothing. The commands that plan offline use the
    /// plugins built into the binary this way.
    pub async fn fixed(
        runtime: Arc<Runtime>,
        plugins: &[(&str, &[u8])],
    ) -> anyhow::Result<Arc<Self>> {
        let registry = Arc::new(Registry {
            // Nothing is read from a source: there is no configuration.
            sources: Sources::default(),
            runtime,
            dir: None,
            state: RwLock::default(),
        });
        for (name, wasm) in plugins {
            let plugin = registry
                .runtime
                .load(name, wasm, PluginConfig::default())
                .await
                .with_context(|| format!("loading the built-in plugin {name}"))?;
            if let Some(why) = registry.conflict(name, &plugin) {
                anyhow::bail!("the built-in plugin {name}: {why}");
            }
            // With no configuration, the digest is the component's own.
            let digest = plugin.sha256.clone();
            registry
                .state
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .plugins
                .insert(
                    name.to_string(),
                    Loaded {
                        plugin: Arc::new(plugin),
                        digest,
                    },
                );
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
        let Some(dir) = &self.dir else {
            return Ok(ReloadReport::default());
        };
        let names = Self::plugin_names(dir)?;
        let mut report = ReloadReport::default();
        for name in &names {
            let stamp = self.stamp(dir, name);
            let retry_due = self
                .read()
                .retry_at
                .get(name)
                .is_some_and(|at| Instant::now() >= *at);
            if self.read().seen.get(name) == Some(&stamp) && !retry_due {
                continue;
            }
            self.state
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .retry_at
                .remove(name);
            let loaded = match self.load(dir, name).await {
                Ok(Some(loaded)) => match self.conflict(name, &loaded.plugin) {
                    Some(why) => Err(anyhow::anyhow!(why)),
                    None => Ok(Some(loaded)),
                },
                other => other,
            };
            match loaded {
                Ok(None) => {}
                Ok(Some(loaded)) => {
                    tracing::info!(plugin = %name, sha256 = %loaded.plugin.sha256, version = %loaded.plugin.contract_version, optimized = loaded.plugin.optimized(), "plugin loaded");
                    let provider = &loaded.plugin.metadata.name;
                    if provider != name {
                        // Allowed (two configurations of one provider), but
                        // a copy under the wrong name is the common cause.
                        tracing::warn!(plugin = %name, provider = %provider, "the plugin's file is named {name}, but it calls itself {provider}: it is served, and its metrics and logs are labelled, as {name}");
                    }
                    let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                    state.plugins.insert(name.clone(), loaded);
                    state.failures.remove(name);
                    report.loaded.push(name.clone());
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::error!(plugin = %name, error = %why, "plugin failed to load; keeping the previous version, if any");
                    let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
                    state.failures.insert(name.clone(), why.clone());
                    if source_of(dir, name).is_some_and(|s| s.is_remote()) {
                        state
                            .retry_at
                            .insert(name.clone(), Instant::now() + SOURCE_RETRY);
                    }
                    drop(state);
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
        state.retry_at.retain(|n, _| names.contains(n));
        state.failures.retain(|n, _| names.contains(n));
        Ok(report)
    }

    /// Why `plugin` cannot serve beside the plugins loaded under other
    /// names: a providerID scheme or NodeClass kind is one plugin's alone,
    /// or one could answer for, or delete, the other's instances.
    fn conflict(&self, name: &str, plugin: &Plugin) -> Option<String> {
        let state = self.read();
        let others = state.plugins.iter().filter(|(n, _)| n.as_str() != name);
        for (other, loaded) in others {
            let theirs = &loaded.plugin.metadata;
            if let Some(scheme) = plugin
                .metadata
                .provider_id_schemes
                .iter()
                .find(|s| theirs.provider_id_schemes.contains(s))
            {
                return Some(format!(
                    "providerID scheme {scheme:?} is already served by plugin {other}"
                ));
            }
            if let Some(kind) = plugin
                .metadata
                .node_classes
                .iter()
                .find(|k| loaded.plugin.serves(&k.group, &k.kind))
            {
                return Some(format!(
                    "NodeClass kind {}/{} is already served by plugin {other}",
                    kind.group, kind.kind
                ));
            }
        }
        None
    }

    /// Re-reads the directory every `interval`, and drops the instances
    /// idle since long ([`Plugin::trim_idle`]), until the registry is dropped.
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
                registry.trim_idle(std::time::Instant::now());
            }
        })
    }

    /// Drops each plugin's warm instances idle for [`crate::WARM_IDLE`] but
    /// its last one.
    pub fn trim_idle(&self, now: std::time::Instant) {
        for plugin in self.plugins() {
            let dropped = plugin.trim_idle(now);
            if dropped > 0 {
                tracing::debug!(plugin = %plugin.name, dropped, "idle instances dropped");
            }
        }
    }

    fn plugin_names(dir: &Dir) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        let mut configs = Vec::new();
        for entry in dir.entries().context("listing the plugin directory")? {
            let file = entry?.file_name();
            let file = file.to_string_lossy();
            // Skip kubelet's `..data` and `..<timestamp>` entries and dotfiles.
            if file.starts_with('.') {
                continue;
            }
            if let Some(name) = file
                .strip_suffix(".wasm")
                .or_else(|| file.strip_suffix(".wasm.zst"))
            {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            } else if let Some(name) = file.strip_suffix(".yaml") {
                configs.push(name.to_string());
            }
        }
        // A configuration without its .wasm is a plugin when it names a source.
        for name in configs {
            if !names.contains(&name) && source_of(dir, &name).is_some() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn stamp(&self, dir: &Dir, name: &str) -> Stamp {
        let stamp = |dir: &Dir, f: &str| match dir.metadata(f) {
            Ok(m) => (m.len(), m.modified().ok().map(|t| t.into_std())),
            Err(_) => (0, None),
        };
        let mut out: Stamp = [
            format!("{name}.wasm"),
            format!("{name}.wasm.zst"),
            format!("{name}.yaml"),
        ]
        .iter()
        .map(|f| stamp(dir, f))
        .collect();
        // A new file on the volume under the same name reloads too.
        // Only with a volume: the stamp is taken every pass, and parsing a
        // configuration whose settings hold a catalog is not free.
        if let Some(volume) = &self.sources.volume
            && let Some(path) = source_of(dir, name).and_then(|s| s.volume)
        {
            out.push(stamp(volume, &path));
        }
        out
    }

    /// `<name>.wasm`, else `<name>.wasm.zst` decompressed.
    fn read_wasm(dir: &Dir, name: &str) -> anyhow::Result<Vec<u8>> {
        match dir.read(format!("{name}.wasm")) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {name}.wasm")),
        }
        let compressed = dir
            .read(format!("{name}.wasm.zst"))
            .with_context(|| format!("reading {name}.wasm.zst"))?;
        decompress(&compressed).with_context(|| format!("decompressing {name}.wasm.zst"))
    }

    /// Loads `name` unless its contents are what is loaded already.
    async fn load(&self, dir: &Dir, name: &str) -> anyhow::Result<Option<Loaded>> {
        let config_text = match dir.read_to_string(format!("{name}.yaml")) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {name}.yaml")),
        };
        let config = match &config_text {
            Some(text) => PluginConfig::from_yaml(text).with_context(|| format!("{name}.yaml"))?,
            None => PluginConfig::default(),
        };
        let wasm = match (&config.source, dir.metadata(format!("{name}.wasm")).is_ok()) {
            (Some(_), true) => {
                anyhow::bail!("both {name}.wasm and a source in {name}.yaml: keep one")
            }
            (Some(source), false) => self.sources.read(source).await?,
            (None, _) => Self::read_wasm(dir, name)?,
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
        let plugin = self.runtime.load(name, &wasm, config).await?;
        Ok(Some(Loaded {
            plugin: Arc::new(plugin),
            digest,
        }))
    }
}

/// The `source` of `<name>.yaml`, if it parses and has one.
fn source_of(dir: &Dir, name: &str) -> Option<Source> {
    /// Typed, so a digest of digits stays the string it is written as.
    #[derive(serde::Deserialize)]
    struct WithSource {
        source: Option<Source>,
    }
    let text = dir.read_to_string(format!("{name}.yaml")).ok()?;
    serde_saphyr::from_str::<WithSource>(&text).ok()?.source
}

/// Far above any plugin (they are a few MiB at most), far below harm.
const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// A `.wasm.zst` plugin decompressed, bounded by the largest plugin size.
pub fn decompress(compressed: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(compressed)?
        .take(MAX_PLUGIN_BYTES + 1)
        .read_to_end(&mut out)?;
    anyhow::ensure!(
        out.len() as u64 <= MAX_PLUGIN_BYTES,
        "larger than {MAX_PLUGIN_BYTES} bytes"
    );
    Ok(out)
}
