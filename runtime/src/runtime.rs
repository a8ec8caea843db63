//! The wasmtime engine every plugin runs in, its linker with the host
//! capabilities, and what is shared across plugins.

use super::bindings::v0_1_4;
use super::budget::MemoryBudget;
use super::capabilities::{
    Capabilities, cache::KvCache, cluster::ClusterView, log::LogLimiter, secrets::SecretStore,
    tokens,
};
use super::code::{CodeSlot, TierUp};
use super::compile::{Compiler, Tier, compile};
use super::config::PluginConfig;
use super::epoch::{EpochTicker, TICK};
use super::http::OutboundHttp;
use super::metrics::PluginMetrics;
use super::oci::Registries;
use super::plugin::Plugin;
use super::precompiled::PrecompiledCache;
use super::state::State;
use anyhow::Context;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

/// What the host gives every plugin, configured once at start.
pub struct RuntimeOptions {
    pub precompiled: Option<cap_std::fs::Dir>,
    pub secrets: SecretStore,
    pub tokens: Arc<dyn tokens::TokenSource>,
    pub cluster: Arc<ClusterView>,
    /// PEM bundles trusted for outbound HTTPS besides the system roots. The
    /// cluster's CA (in `cluster`) is trusted for its API endpoint alone.
    pub extra_roots: Vec<Vec<u8>>,
    /// Where plugins not in the precompiled cache are compiled.
    pub compiler: Compiler,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            precompiled: None,
            secrets: SecretStore::none(),
            tokens: Arc::new(tokens::NoTokenSource),
            cluster: Arc::new(ClusterView::default()),
            extra_roots: Vec::new(),
            compiler: Compiler::InProcess,
        }
    }
}

pub struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Linker<State>,
    /// Winch's engine and linker: plugins not in the precompiled cache serve
    /// on it until their optimized code is ready.
    quick: Option<(Engine, Linker<State>)>,
    /// Advances both engines' epochs while calls run.
    pub(super) ticker: EpochTicker,
    pub(super) http: OutboundHttp,
    pub metrics: Arc<PluginMetrics>,
    precompiled: Option<PrecompiledCache>,
    /// Winch's code, kept apart: its engine has its own compatibility hash.
    quick_precompiled: Option<PrecompiledCache>,
    compiler: Compiler,
    pub(super) secrets: Arc<SecretStore>,
    /// The OCI client plugin sources are pulled with.
    pub(super) registries: Arc<Registries>,
    tokens: Arc<dyn tokens::TokenSource>,
    pub cluster: Arc<ClusterView>,
    /// Per plugin name, kept across reloads of the same code and settings.
    kept: Mutex<BTreeMap<String, Kept>>,
}

/// What outlives one load of a plugin: its budget, cache and log rate.
#[derive(Clone)]
struct Kept {
    sha256: String,
    settings: [u8; 32],
    budget: Arc<MemoryBudget>,
    cache: Arc<KvCache>,
    log: Arc<LogLimiter>,
}

impl Runtime {
    pub fn new(options: RuntimeOptions) -> anyhow::Result<Arc<Self>> {
        let engine = Engine::new(&engine_config())?;
        let linker = linker(&engine)?;
        let quick = match Engine::new(&quick_engine_config()) {
            Ok(quick) => {
                let linker = self::linker(&quick)?;
                Some((quick, linker))
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "no quick compiler: large plugins wait for their optimized compile");
                None
            }
        };
        let ticker = EpochTicker::start(&engine, quick.as_ref().map(|(e, _)| e));

        let precompiled = match &options.precompiled {
            Some(dir) => Some(PrecompiledCache::open(dir, &engine)?),
            None => None,
        };
        let quick_precompiled = match (&options.precompiled, &quick) {
            (Some(dir), Some((quick, _))) => Some(PrecompiledCache::open(dir, quick)?),
            _ => None,
        };
        Ok(Arc::new(Runtime {
            engine,
            linker,
            quick,
            ticker,
            http: {
                let (endpoint, ca) = options.cluster.endpoint_and_ca();
                let cluster = (!endpoint.is_empty()).then_some((endpoint.as_str(), ca.as_str()));
                OutboundHttp::new(&options.extra_roots, cluster)?
            },
            metrics: Arc::new(PluginMetrics::default()),
            precompiled,
            quick_precompiled,
            compiler: options.compiler,
            secrets: Arc::new(options.secrets),
            registries: Arc::new(Registries::new(&options.extra_roots)),
            tokens: options.tokens,
            cluster: options.cluster,
            kept: Mutex::new(BTreeMap::new()),
        }))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles (or loads from the precompiled cache) and links a plugin,
    /// after checking it implements a contract version this host supports.
    pub async fn load(
        self: &Arc<Self>,
        name: &str,
        wasm: &[u8],
        config: PluginConfig,
    ) -> anyhow::Result<Plugin> {
        let sha256 = hex::encode(Sha256::digest(wasm));
        let cached = self
            .precompiled
            .as_ref()
            .and_then(|cache| cache.get(&self.engine, &sha256));
        let quick = match self.quick.as_ref() {
            Some((engine, linker)) if cached.is_none() => {
                match self.quick_code(engine, wasm, &sha256).await {
                    Ok(component) => Some((component, linker)),
                    // A proposal Winch lacks: Cranelift alone decides.
                    Err(e) => {
                        tracing::warn!(plugin = %name, error = %format!("{e:#}"), "no quick compile; waiting for the optimized one");
                        None
                    }
                }
            }
            _ => None,
        };
        let optimized = quick.is_none();
        let (component, linker) = match (cached, quick) {
            (Some(component), _) => (component, &self.linker),
            (None, Some(quick)) => quick,
            (None, None) => (self.optimized(name, wasm, &sha256).await?, &self.linker),
        };
        let version = super::inspect::contract_version(&component)
            .with_context(|| format!("plugin {name}"))?;
        let code = Arc::new(CodeSlot::new(linker, component, optimized)?);
        let kept = self.kept_for(name, &sha256, &config);
        let config = Arc::new(config);
        let caps = Capabilities {
            plugin: Arc::from(name),
            config: config.clone(),
            secrets: self.secrets.clone(),
            tokens: self.tokens.clone(),
            cache: kept.cache,
            budget: kept.budget,
            log: kept.log,
            cluster: self.cluster.clone(),
        };
        let plugin = Plugin::new(
            self.clone(),
            caps,
            code.clone(),
            sha256.clone(),
            wasm.len(),
            version,
        )
        .await
        .with_context(|| format!("plugin {name}"))?;
        if !optimized {
            let from = TierUp {
                wasm: wasm.to_vec(),
                sha256,
            };
            if wasm.len() >= OPTIMIZE_AT_ONCE_BYTES {
                self.optimize_later(name, from, code);
            } else {
                code.optimize_when_hot(from, tier_up_ticks());
            }
        }
        Ok(plugin)
    }

    /// Winch's code for the plugin, from the precompiled cache or compiled
    /// and put there.
    async fn quick_code(
        &self,
        engine: &Engine,
        wasm: &[u8],
        sha256: &str,
    ) -> anyhow::Result<Component> {
        let cache = self.quick_precompiled.as_ref();
        if let Some(component) = cache.and_then(|c| c.get(engine, sha256)) {
            return Ok(component);
        }
        let compiled = compile(&self.compiler, engine, wasm, Tier::Quick).await?;
        if let (Some(cache), Some(serialized)) = (cache, &compiled.serialized) {
            cache.put(sha256, serialized);
        }
        Ok(compiled.component)
    }

    /// Cranelift's code for the plugin, put in the precompiled cache.
    async fn optimized(&self, name: &str, wasm: &[u8], sha256: &str) -> anyhow::Result<Component> {
        let compiled = compile(&self.compiler, &self.engine, wasm, Tier::Optimized)
            .await
            .with_context(|| format!("plugin {name}: not a valid WebAssembly component"))?;
        if let (Some(cache), Some(serialized)) = (&self.precompiled, &compiled.serialized) {
            cache.put(sha256, serialized);
        }
        Ok(compiled.component)
    }

    /// Compiles the plugin with Cranelift in the background and moves its
    /// calls onto that code; until then they run on the quick compile.
    pub(super) fn optimize_later(self: &Arc<Self>, name: &str, from: TierUp, code: Arc<CodeSlot>) {
        let runtime = self.clone();
        let name = name.to_string();
        let TierUp { wasm, sha256 } = from;
        tokio::spawn(async move {
            let start = std::time::Instant::now();
            let optimized = runtime
                .optimized(&name, &wasm, &sha256)
                .await
                .and_then(|component| code.optimize(&runtime.linker, component));
            match optimized {
                Ok(()) => {
                    tracing::info!(plugin = %name, seconds = start.elapsed().as_secs_f64(), "plugin optimized: its calls run on Cranelift's code")
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %format!("{e:#}"), "optimizing the plugin failed; it keeps its quick compile")
                }
            }
        });
    }

    /// The plugin's budget, cache and log rate. A reload of the same code
    /// and settings shares its cache. Other code under the same name starts
    /// with a cache of its own, so it never reads what its predecessor
    /// stored; so do other settings, as what a plugin caches may derive from
    /// them. The predecessor, which serves until the registry swaps it out
    /// and finishes the calls it has, keeps writing to its own.
    fn kept_for(&self, name: &str, sha256: &str, config: &PluginConfig) -> Kept {
        let settings = settings_digest(config);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let entry = kept.entry(name.to_string()).or_insert_with(|| {
            let budget = Arc::new(MemoryBudget::new(name, config.memory_budget_bytes()));
            Kept {
                sha256: sha256.to_string(),
                settings,
                cache: Arc::new(KvCache::new(budget.clone())),
                budget,
                log: Arc::new(LogLimiter::default()),
            }
        });
        entry.budget.set_limit(config.memory_budget_bytes());
        if entry.sha256 != sha256 || entry.settings != settings {
            entry.cache = Arc::new(KvCache::new(entry.budget.clone()));
            entry.sha256 = sha256.to_string();
            entry.settings = settings;
        }
        entry.clone()
    }

    /// The memory a plugin's budget holds now, by kind.
    pub fn memory_usage(&self, name: &str) -> Option<super::budget::Usage> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(name).map(|k| k.budget.usage())
    }
}

/// What identifies a plugin's settings, secret ones by the secret they name.
fn settings_digest(config: &PluginConfig) -> [u8; 32] {
    let mut digest = Sha256::new();
    for map in [&config.settings, &config.secret_settings] {
        for (key, value) in map {
            for part in [key, value] {
                digest.update((part.len() as u64).to_le_bytes());
                digest.update(part.as_bytes());
            }
        }
        digest.update([0xff]);
    }
    digest.finalize().into()
}

/// The engine's configuration. A plugin compiled under any other does not
/// load, so the child compiler builds its engine from this too.
pub fn engine_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    // No component-model-async: plain calls are 2-3x cheaper without it.
    config.concurrency_support(false);
    config.epoch_interruption(true);
    config
}

/// Winch: compiles in a fraction of Cranelift's time into slower code. A
/// plugin not in the precompiled cache serves on it first; Cranelift compiles
/// it in the background at once when it is large (a JavaScript or Python
/// component, tens of MB, runs its interpreter on that code), and once its
/// calls have used [`TIER_UP_CPU`] when it is not. A plugin that stays cold
/// never pays for Cranelift's compile, several times Winch's.
pub fn quick_engine_config() -> Config {
    let mut config = engine_config();
    config.strategy(wasmtime::Strategy::Winch);
    config
}

/// From this size up, a plugin on Winch's code is optimized at once.
const OPTIMIZE_AT_ONCE_BYTES: usize = 4 << 20;

/// CPU a smaller plugin's calls spend on Winch's code before Cranelift
/// compiles it: about what that compile costs for a plugin of a few hundred
/// KiB, so the compile is paid for only by a plugin that would earn it back.
/// Counted in the epoch ticks a call runs through; its waits (its HTTP) do
/// not count.
pub const TIER_UP_CPU: Duration = Duration::from_secs(1);

fn tier_up_ticks() -> u64 {
    (TIER_UP_CPU.as_micros() / TICK.as_micros()) as u64
}

/// A linker with the host's capabilities for plugins compiled by `engine`.
fn linker(engine: &Engine) -> anyhow::Result<Linker<State>> {
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    use v0_1_4::karpenter::provider as wit;
    wit::types::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::log::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::config::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::tokens::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::cache::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::cluster::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    wit::signing::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)?;
    Ok(linker)
}
