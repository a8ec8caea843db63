//! One loaded plugin: its compiled component, a pool of warm instances and
//! the typed calls of the contract.
//!
//! Every call runs on an instance of its own (in a burst, one another call
//! has finished with, so a burst of short calls does not make an instance
//! each), under the plugin's memory cap, CPU budget and wall-clock limit.
//! An instance that traps, times out or returns garbage is dropped; the next
//! call gets a fresh one.

use super::bindings::catalog::Guest as CatalogGuest;
use super::bindings::v0_1_4::ProviderPlugin;
use super::bindings::wit;
use super::budget::OverBudget;
use super::capabilities::Capabilities;
use super::catalog::{self, InstanceTypes, Table};
use super::code::{Code, CodeSlot};
use super::epoch::TICK;
use super::http::PluginHttp;
use super::metrics::CallMetrics;
use super::runtime::Runtime;
use super::state::State;
use super::stderr;
use super::validate;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

/// Warm instances kept per plugin; beyond this, finished ones are dropped.
const MAX_WARM: usize = 8;
/// Calls holding instances beyond which a call that finds none warm waits
/// for one to come back before making its own, for as long as calls keep
/// ending within [`BURST_WAIT`] of each other. A burst of short calls (a
/// scale-out's launches) is then served by a few instances reused rather
/// than by one new linear memory each; calls that hold theirs for minutes
/// (a VM create polling) keep the next one waiting no longer than that.
const BURST_INSTANCES: usize = MAX_WARM;
const BURST_WAIT: Duration = Duration::from_millis(250);
/// An instance whose linear memory grew by more than this since it was
/// made (a large list, say) is dropped after its call rather than kept
/// warm: memories never shrink, so an instance that listed a large cluster
/// is not kept with that memory resident. Measured from the instance's own
/// start, as a JavaScript or Python runtime starts with tens of MiB and a
/// new instance of one costs a millisecond or more.
const MAX_WARM_GROWTH: usize = 2 << 20;
/// A warm instance unused this long is dropped, all but the one used last:
/// a burst of concurrent calls (a scale-out's launches) would otherwise
/// leave up to [`MAX_WARM`] instances holding their memories while idle.
pub const WARM_IDLE: Duration = Duration::from_secs(30);

/// Why a call failed. `Provider` is the plugin's own typed answer; the others
/// mean the plugin misbehaved or could not run.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("plugin {plugin}: {call}: {}", describe(.error))]
    Provider {
        plugin: String,
        call: &'static str,
        error: wit::Error,
    },
    #[error("plugin {plugin}: {call}: {message}")]
    Failed {
        plugin: String,
        call: &'static str,
        message: String,
    },
}

/// A plugin whose `metadata` breaks the contract: it is not loaded. The
/// conformance kit reports it as its `metadata` check's failure.
#[derive(Debug, thiserror::Error)]
#[error("metadata: {0}")]
pub struct InvalidMetadata(pub String);

impl CallError {
    /// The provider's typed error, if that is what this is.
    pub fn provider_error(&self) -> Option<&wit::Error> {
        match self {
            CallError::Provider { error, .. } => Some(error),
            CallError::Failed { .. } => None,
        }
    }
}

pub fn describe(e: &wit::Error) -> String {
    match e {
        wit::Error::InsufficientCapacity(ic) => format!("insufficient capacity: {}", ic.message),
        wit::Error::NodeClassNotReady(m) => format!("node class not ready: {m}"),
        wit::Error::NotFound(m) => format!("not found: {m}"),
        wit::Error::CreateError(c) => format!("create failed: {}: {}", c.reason, c.message),
        wit::Error::Other(o) => format!(
            "{}{}",
            o.message,
            if o.retryable { " (retryable)" } else { "" }
        ),
    }
}

/// What an instance exports: the provider and the optional exports it has.
struct Exports {
    provider: ProviderPlugin,
    catalog: Option<CatalogGuest>,
    table: Option<super::bindings::catalog_table::Guest>,
    interruption: Option<super::bindings::interruption::Guest>,
}

impl Exports {
    /// The plugin's most compact answer: its tables, else its compact
    /// catalog; none when it exports neither or both answer none.
    async fn compact(
        &self,
        s: &mut Store<State>,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> wasmtime::Result<Result<Option<Answer>, wit::Error>> {
        if let Some(table) = &self.table {
            match table.call_get_table(&mut *s, pool, class).await? {
                Ok(None) => {}
                answered => return Ok(answered.map(|t| t.map(Answer::Table))),
            }
        }
        if let Some(catalog) = &self.catalog {
            return Ok(catalog
                .call_get_catalog(s, pool, class)
                .await?
                .map(|c| c.map(Answer::Compact)));
        }
        Ok(Ok(None))
    }
}

/// What get-instance-types answered, in any of its forms.
enum Answer {
    Listed(Vec<wit::InstanceType>),
    Compact(super::bindings::catalog::Catalog),
    Table(super::bindings::catalog_table::InstanceTypeTable),
}

struct Warm {
    /// The code it was made from: a quick compile's instances are dropped
    /// once the optimized code is in place.
    code: Arc<Code>,
    store: Store<State>,
    bindings: Exports,
    /// Its linear memory once instantiated.
    started_with: usize,
    /// When its last call ended.
    idle_since: Instant,
}

pub struct Plugin {
    pub name: String,
    pub sha256: String,
    pub size: usize,
    pub contract_version: String,
    pub metadata: wit::ProviderMetadata,
    code: Arc<CodeSlot>,
    caps: Capabilities,
    runtime: Arc<Runtime>,
    warm: Mutex<Vec<Warm>>,
    /// Permits for live instances (`maxInstances`).
    instances: tokio::sync::Semaphore,
    /// Calls that hold an instance or are making one, and a wake-up
    /// whenever one ends, for calls waiting on the memory budget or in a
    /// burst.
    holding: AtomicUsize,
    call_ended: tokio::sync::Notify,
    /// Whether the host has shown this plugin every NodeClass of its kinds
    /// since it was loaded: a plugin may learn where its instances live from
    /// them, so until then its list and not-found prove nothing.
    node_classes_seen: AtomicBool,
    metrics: CallMetrics,
}

impl Plugin {
    pub(super) async fn new(
        runtime: Arc<Runtime>,
        caps: Capabilities,
        code: Arc<CodeSlot>,
        sha256: String,
        size: usize,
        contract_version: String,
    ) -> anyhow::Result<Self> {
        let metrics = CallMetrics::new(runtime.metrics.clone(), &caps.plugin);
        let instances = tokio::sync::Semaphore::new(caps.config.max_instances as usize);
        let mut plugin = Plugin {
            name: caps.plugin.to_string(),
            sha256,
            size,
            contract_version,
            metadata: wit::ProviderMetadata {
                name: String::new(),
                provider_id_schemes: vec![],
                node_classes: vec![],
            },
            code,
            caps,
            runtime,
            warm: Mutex::new(Vec::new()),
            instances,
            holding: AtomicUsize::new(0),
            call_ended: tokio::sync::Notify::new(),
            node_classes_seen: AtomicBool::new(false),
            metrics,
        };
        let metadata = plugin
            .call("metadata", async |s, b| {
                b.provider
                    .karpenter_provider_provider()
                    .call_metadata(s)
                    .await
            })
            .await?;
        validate::metadata(&metadata).map_err(|e| InvalidMetadata(format!("{e:#}")))?;
        plugin.metadata = metadata;
        Ok(plugin)
    }

    pub fn mark_node_classes_seen(&self) {
        self.node_classes_seen.store(true, Ordering::Relaxed);
    }

    pub fn node_classes_seen(&self) -> bool {
        self.node_classes_seen.load(Ordering::Relaxed)
    }

    /// The component calls run on now.
    pub fn component(&self) -> Component {
        self.code.current().component.clone()
    }

    /// Whether calls run on Cranelift's optimized code, not yet on a quick
    /// compile's.
    pub fn optimized(&self) -> bool {
        self.code.current().optimized
    }

    /// Whether this plugin serves NodeClasses of `group`/`kind`.
    pub fn serves(&self, group: &str, kind: &str) -> bool {
        self.metadata
            .node_classes
            .iter()
            .any(|k| k.group == group && k.kind == kind)
    }

    async fn instantiate(&self) -> wasmtime::Result<Warm> {
        let config = &self.caps.config;
        let allow = config
            .allow_list()
            .map_err(|e| wasmtime::Error::msg(format!("{e:#}")))?;
        let hooks = PluginHttp {
            plugin: self.caps.plugin.clone(),
            budget: self.caps.budget.clone(),
            allow: Arc::new(allow),
            h2c_hosts: Arc::new(config.h2c_hosts.iter().cloned().collect::<BTreeSet<_>>()),
            clients: self.runtime.http.clone(),
        };
        let budget = (config.cpu_ms as u128 * 1000 / TICK.as_micros()).max(1) as u64;
        let code = self.code.current();
        let mut store = Store::new(
            code.component.engine(),
            State::new(self.caps.clone(), hooks, budget),
        );
        store.limiter(|s| s.limiter());
        let quick = (!code.optimized).then(|| self.code.clone());
        let clock = self.runtime.ticker.clock();
        let mut last = clock.now();
        store.epoch_deadline_callback(move |mut ctx| {
            // Only a tick the call ran through is CPU spent on the quick
            // code: one that resumes after awaiting a host call (its HTTP,
            // a sleep) finds several passed. The budget below is charged
            // either way, erring towards stopping a call.
            let now = clock.now();
            if let Some(slot) = &quick
                && now.wrapping_sub(last) == 1
            {
                slot.spent_quick_tick();
            }
            last = now;
            let cpu = &mut ctx.data_mut().cpu;
            cpu.used_ticks += 1;
            if cpu.used_ticks > cpu.budget_ticks {
                let ms = cpu.budget_ticks as u128 * TICK.as_millis();
                return Err(wasmtime::Error::msg(format!(
                    "exceeded its CPU budget of {ms} ms"
                )));
            }
            // Yield so a busy plugin never starves the controller's tasks.
            Ok(UpdateDeadline::Yield(1))
        });
        store.set_epoch_deadline(1);
        let output = store.data().stderr.clone();
        let instantiated = async {
            let instance = code
                .pre
                .instance_pre()
                .instantiate_async(&mut store)
                .await?;
            let provider = ProviderPlugin::new(&mut store, &instance)?;
            let catalog = match &code.catalog {
                Some(indices) => Some(indices.load(&mut store, &instance)?),
                None => None,
            };
            let table = match &code.table {
                Some(indices) => Some(indices.load(&mut store, &instance)?),
                None => None,
            };
            let interruption = match &code.interruption {
                Some(indices) => Some(indices.load(&mut store, &instance)?),
                None => None,
            };
            wasmtime::Result::Ok(Exports {
                provider,
                catalog,
                table,
                interruption,
            })
        };
        let instantiated: wasmtime::Result<Exports> = instantiated.await;
        match instantiated {
            Ok(bindings) => {
                let started_with = store.data().memory_bytes();
                Ok(Warm {
                    code,
                    store,
                    bindings,
                    started_with,
                    idle_since: Instant::now(),
                })
            }
            Err(e) => Err(match output.take() {
                Some(text) => e.context(GuestOutput(text)),
                None => e,
            }),
        }
    }

    /// Runs `f` on a warm (or new) instance within the plugin's limits.
    async fn call<R>(
        &self,
        call: &'static str,
        f: impl AsyncFnOnce(&mut Store<State>, &Exports) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let start = Instant::now();
        let failed = |message: String| CallError::Failed {
            plugin: self.name.clone(),
            call,
            message,
        };
        // Never closed, so acquiring only waits.
        let _permit = self.instances.acquire().await;
        let _ticking = self.runtime.ticker.ticking();
        // Declared before `warm`, so dropped after it: once this call's
        // instance is pooled or freed, calls waiting for memory try again.
        let mut holding = Holding {
            plugin: self,
            counted: false,
        };
        let memory_mib = self.caps.config.memory_mib;
        let mut warm = self.warm_instance(&mut holding).await.map_err(|e| {
            self.metrics
                .observe(call, start.elapsed(), Some("instantiate"));
            let output = e.downcast_ref::<GuestOutput>().map(|o| o.0.as_str());
            failed(format!(
                "cannot instantiate: {}",
                trap_message(&e, memory_mib, output)
            ))
        })?;
        warm.store.data_mut().cpu.used_ticks = 0;
        warm.store.set_epoch_deadline(1);
        let Warm {
            store, bindings, ..
        } = &mut warm;
        let outcome =
            tokio::time::timeout(self.caps.config.call_timeout(), f(store, bindings)).await;
        let elapsed = start.elapsed();
        if !warm.code.optimized
            && let Some(from) = self.code.take_when_hot()
        {
            tracing::info!(plugin = %self.name, cpu_seconds = super::runtime::TIER_UP_CPU.as_secs_f64(), "plugin hot on its quick compile: optimizing it");
            self.runtime
                .optimize_later(&self.name, from, self.code.clone());
        }
        let output = warm.store.data().stderr.take();
        if let Some(text) = &output {
            self.caps.log.guest_stderr(&self.name, call, text);
        }
        match outcome {
            Ok(Ok(value)) => {
                self.metrics.observe(call, elapsed, None);
                let mut pool = self.warm.lock().unwrap_or_else(|e| e.into_inner());
                let grown = warm
                    .store
                    .data()
                    .memory_bytes()
                    .saturating_sub(warm.started_with);
                let current = Arc::ptr_eq(&warm.code, &self.code.current());
                if pool.len() < MAX_WARM && grown <= MAX_WARM_GROWTH && current {
                    warm.idle_since = Instant::now();
                    pool.push(warm);
                }
                Ok(value)
            }
            Ok(Err(trap)) => {
                self.metrics.observe(call, elapsed, Some("trap"));
                let message = trap_message(&trap, memory_mib, output.as_deref());
                tracing::warn!(plugin = %self.name, call, error = %message, "plugin call failed; its instance is discarded");
                Err(failed(message))
            }
            Err(_) => {
                self.metrics.observe(call, elapsed, Some("timeout"));
                Err(failed(with_output(
                    format!(
                        "did not finish within {} s",
                        self.caps.config.call_timeout_seconds
                    ),
                    output.as_deref(),
                )))
            }
        }
    }

    /// Drops the warm instances idle for [`WARM_IDLE`] at `now` but the one
    /// used last (the next call's); returns how many went.
    pub fn trim_idle(&self, now: Instant) -> usize {
        let stale: Vec<Warm> = {
            let mut pool = self.warm.lock().unwrap_or_else(|e| e.into_inner());
            // A stack, pushed as calls end: the oldest first, and the last
            // one is the next call's.
            let last = pool.len().saturating_sub(1);
            let stale = pool[..last]
                .iter()
                .take_while(|w| now.saturating_duration_since(w.idle_since) >= WARM_IDLE)
                .count();
            pool.drain(..stale).collect()
        };
        // Dropped outside the lock: each frees a linear memory.
        stale.len()
    }

    /// A warm instance, or a new one, counted in `holding` from the moment
    /// it is taken or started. In a burst (see [`BURST_INSTANCES`]) the call
    /// first waits for a warm one. When the memory budget cannot take a new
    /// one, the idle ones are dropped first, then the call waits for running
    /// calls to give memory back; it fails only when it is alone.
    async fn warm_instance(&self, holding: &mut Holding<'_>) -> wasmtime::Result<Warm> {
        loop {
            // Enabled before the pool is looked at: a call ending in between
            // still wakes this one.
            let ended = self.call_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if let Some(w) = self.warm.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                if Arc::ptr_eq(&w.code, &self.code.current()) {
                    holding.count();
                    return Ok(w);
                }
                continue;
            }
            if self.holding.load(Ordering::SeqCst) >= BURST_INSTANCES
                && tokio::time::timeout(BURST_WAIT, ended.as_mut())
                    .await
                    .is_ok()
            {
                continue;
            }
            // Counted before it exists, so that a burst arriving at once sees
            // the instances already being made.
            holding.count();
            match self.instantiate().await {
                Ok(w) => return Ok(w),
                Err(e) if e.is::<OverBudget>() => {
                    holding.uncount();
                    let idle =
                        std::mem::take(&mut *self.warm.lock().unwrap_or_else(|e| e.into_inner()));
                    let running = self.holding.load(Ordering::SeqCst);
                    if idle.is_empty() && running == 0 {
                        return Err(e);
                    }
                    drop(idle);
                    if running > 0 {
                        ended.await;
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Turns the contract's `result<T, error>` into ours, counting typed errors.
    fn typed<T>(&self, call: &'static str, r: Result<T, wit::Error>) -> Result<T, CallError> {
        r.map_err(|error| {
            let (kind, code) = match &error {
                wit::Error::InsufficientCapacity(_) => {
                    ("insufficient-capacity", "InsufficientCapacity")
                }
                wit::Error::NodeClassNotReady(_) => ("node-class-not-ready", "NodeClassNotReady"),
                wit::Error::NotFound(_) => ("not-found", "NotFound"),
                wit::Error::CreateError(c) => ("create-error", c.reason.as_str()),
                wit::Error::Other(_) => ("other", "Other"),
            };
            self.metrics.error(call, kind);
            self.metrics.cloud_error(call, code);
            CallError::Provider {
                plugin: self.name.clone(),
                call,
                error,
            }
        })
    }

    fn invalid(&self, call: &'static str, e: anyhow::Error) -> CallError {
        CallError::Failed {
            plugin: self.name.clone(),
            call,
            message: format!("returned an invalid result: {e:#}"),
        }
    }

    pub async fn metadata_call(&self) -> Result<wit::ProviderMetadata, CallError> {
        self.call("metadata", async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_metadata(s)
                .await
        })
        .await
    }

    pub async fn validate_node_class(
        &self,
        class: &wit::NodeClass,
    ) -> Result<wit::NodeClassStatus, CallError> {
        const CALL: &str = "validate-node-class";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_validate_node_class(s, class)
                .await
        });
        let status = self.typed(CALL, r.await?)?;
        validate::node_class_status(&status).map_err(|e| self.invalid(CALL, e))?;
        Ok(status)
    }

    pub async fn get_instance_types(
        &self,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<InstanceTypes, CallError> {
        const CALL: &str = "get-instance-types";
        let types = self.instance_types(CALL, pool, class).await?;
        let checked = match &types {
            InstanceTypes::Listed(listed) => validate::instance_types(listed.iter()),
            InstanceTypes::Table(table) => validate::instance_types(table.rows()),
        };
        checked.map_err(|e| self.invalid(CALL, e))?;
        Ok(types)
    }

    /// The plugin's catalog, from its most compact export: the tables, then
    /// the compact catalog, then the listed instance types.
    async fn instance_types(
        &self,
        call: &'static str,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<InstanceTypes, CallError> {
        let r = self.call(call, async |s, b| {
            match b.compact(&mut *s, pool, class).await? {
                Ok(Some(answer)) => return Ok(Ok(answer)),
                Ok(None) => {}
                Err(e) => return Ok(Err(e)),
            }
            Ok(b.provider
                .karpenter_provider_provider()
                .call_get_instance_types(s, pool, class)
                .await?
                .map(Answer::Listed))
        });
        self.answer(call, self.typed(call, r.await?)?)
    }

    /// An answer checked for indices and spans, in the form the host keeps.
    fn answer(&self, call: &'static str, answer: Answer) -> Result<InstanceTypes, CallError> {
        let types = match answer {
            Answer::Listed(types) => Ok(InstanceTypes::Listed(types)),
            Answer::Compact(catalog) => catalog::expand(&catalog).map(InstanceTypes::Listed),
            Answer::Table(table) => Table::check(table).map(InstanceTypes::Table),
        };
        types.map_err(|e| self.invalid(call, e))
    }

    /// get-instance-types through the provider export alone, for the kit to
    /// compare with the compact forms.
    pub async fn listed_instance_types(
        &self,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<Vec<wit::InstanceType>, CallError> {
        const CALL: &str = "get-instance-types";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_get_instance_types(s, pool, class)
                .await
        });
        self.typed(CALL, r.await?)
    }

    /// The compact form the host would use, alone and expanded, with the
    /// name of the call that gave it: get-table, else get-catalog. None when
    /// the plugin exports neither or both answer none, for the kit to tell
    /// whether it compared anything.
    pub async fn compact_instance_types(
        &self,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<Option<(&'static str, Vec<wit::InstanceType>)>, CallError> {
        const CALL: &str = "get-table or get-catalog";
        if !self.has_catalog() {
            return Ok(None);
        }
        let r = self.call(CALL, async |s, b| b.compact(s, pool, class).await);
        let Some(answer) = self.typed(CALL, r.await?)? else {
            return Ok(None);
        };
        let call = match answer {
            Answer::Table(_) => "get-table",
            _ => "get-catalog",
        };
        let types = self.answer(call, answer)?;
        Ok(Some((call, types.into_listed())))
    }

    /// Whether the plugin exports a compact form of its catalog (contract
    /// 0.1.2's `catalog` or 0.1.4's `catalog-table`).
    pub fn has_catalog(&self) -> bool {
        let code = self.code.current();
        code.catalog.is_some() || code.table.is_some()
    }

    /// get-instance-types without the host's checks: the conformance kit
    /// reports every problem, where a call stops at the first.
    pub async fn get_instance_types_unchecked(
        &self,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<Vec<wit::InstanceType>, CallError> {
        Ok(self
            .instance_types("get-instance-types", pool, class)
            .await?
            .into_listed())
    }

    /// What the operator granted this plugin, limits included.
    pub fn config(&self) -> &super::PluginConfig {
        &self.caps.config
    }

    pub async fn create(
        &self,
        claim: &wit::NodeClaim,
        class: &wit::NodeClass,
    ) -> Result<wit::Instance, CallError> {
        const CALL: &str = "create";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_create(s, claim, class)
                .await
        });
        let instance = self.typed(CALL, r.await?)?;
        validate::instance(&instance, &self.metadata).map_err(|e| self.invalid(CALL, e))?;
        Ok(instance)
    }

    pub async fn delete(&self, claim: &wit::NodeClaim) -> Result<(), CallError> {
        const CALL: &str = "delete";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_delete(s, claim)
                .await
        });
        self.typed(CALL, r.await?)
    }

    pub async fn get(&self, provider_id: &str) -> Result<wit::Instance, CallError> {
        const CALL: &str = "get";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_get(s, provider_id)
                .await
        });
        let instance = self.typed(CALL, r.await?)?;
        validate::instance(&instance, &self.metadata).map_err(|e| self.invalid(CALL, e))?;
        Ok(instance)
    }

    pub async fn list(&self) -> Result<Vec<wit::Instance>, CallError> {
        const CALL: &str = "list-instances";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_list_instances(s)
                .await
        });
        let instances = self.typed(CALL, r.await?)?;
        for i in &instances {
            validate::instance(i, &self.metadata).map_err(|e| self.invalid(CALL, e))?;
        }
        Ok(instances)
    }

    pub async fn is_drifted(
        &self,
        claim: &wit::NodeClaim,
        class: &wit::NodeClass,
    ) -> Result<Option<String>, CallError> {
        const CALL: &str = "is-drifted";
        let r = self.call(CALL, async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_is_drifted(s, claim, class)
                .await
        });
        self.typed(CALL, r.await?)
    }

    /// The Node conditions by which the cloud announces an interruption
    /// (contract 0.1.3); none when the plugin does not export `interruption`.
    pub async fn interruption_signals(
        &self,
    ) -> Result<Vec<super::bindings::interruption::InterruptionSignal>, CallError> {
        if self.code.current().interruption.is_none() {
            return Ok(Vec::new());
        }
        self.call("interruption-signals", async |s, b| match &b.interruption {
            Some(i) => i.call_interruption_signals(s).await,
            None => Ok(Vec::new()),
        })
        .await
    }

    /// Tells the plugin the host acted on an interruption of an instance of
    /// `offering` (contract 0.1.3); nothing when it does not export
    /// `interruption`.
    pub async fn offering_interrupted(
        &self,
        offering: &wit::OfferingRef,
        seconds: u64,
    ) -> Result<(), CallError> {
        if self.code.current().interruption.is_none() {
            return Ok(());
        }
        self.call("offering-interrupted", async |s, b| match &b.interruption {
            Some(i) => i.call_offering_interrupted(s, offering, seconds).await,
            None => Ok(()),
        })
        .await
    }

    pub async fn repair_policies(&self) -> Result<Vec<wit::RepairPolicy>, CallError> {
        self.call("repair-policies", async |s, b| {
            b.provider
                .karpenter_provider_provider()
                .call_repair_policies(s)
                .await
        })
        .await
    }
}

/// A call holding an instance; when it ends, the calls waiting for memory
/// are woken.
struct Holding<'a> {
    plugin: &'a Plugin,
    counted: bool,
}

impl Holding<'_> {
    fn count(&mut self) {
        if !self.counted {
            self.plugin.holding.fetch_add(1, Ordering::SeqCst);
            self.counted = true;
        }
    }

    /// The instance could not be made. Nothing was freed, so no call is
    /// woken: this one, waiting for memory next, would wake itself.
    fn uncount(&mut self) {
        if self.counted {
            self.counted = false;
            self.plugin.holding.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.plugin.holding.fetch_sub(1, Ordering::SeqCst);
            self.plugin.call_ended.notify_waiters();
        }
    }
}

/// What the guest wrote to stderr before its instantiation failed.
#[derive(Debug)]
struct GuestOutput(String);

impl std::fmt::Display for GuestOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stderr: {}", self.0)
    }
}

/// How much of the guest's stderr an error message carries; the log has
/// the rest.
const STDERR_IN_ERROR: usize = 1 << 10;

/// `message`, then the end of what the guest wrote to stderr, if anything:
/// a panic's message or an exception's traceback says why.
fn with_output(message: String, output: Option<&str>) -> String {
    let Some(output) = output else {
        return message;
    };
    let output = stderr::for_error(output);
    let mut cut = output.len().saturating_sub(STDERR_IN_ERROR);
    while !output.is_char_boundary(cut) {
        cut += 1;
    }
    let more = if cut > 0 { "…" } else { "" };
    format!("{message}; its stderr: {more}{}", &output[cut..])
}

/// A trap's message without wasmtime's backtrace noise: what happened, then
/// the root cause, then the end of the guest's stderr.
fn trap_message(e: &wasmtime::Error, memory_mib: u64, output: Option<&str>) -> String {
    if let Some(over) = e.downcast_ref::<OverBudget>() {
        return with_output(over.to_string(), output);
    }
    let cause = e.root_cause().to_string();
    let cause = first_line(&cause);
    let message = if cause.contains("forcing a memory growth failure")
        || cause.contains("forcing trap when growing memory")
        || cause.contains("memory minimum size")
    {
        format!("grew past its memory limit of {memory_mib} MiB (memoryMib): {cause}")
    } else if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        let what = match trap {
            wasmtime::Trap::UnreachableCodeReached => "panicked (wasm `unreachable` trap)",
            wasmtime::Trap::Interrupt => "was interrupted",
            wasmtime::Trap::MemoryOutOfBounds => "accessed memory out of bounds",
            wasmtime::Trap::StackOverflow => "overflowed its stack",
            _ => "trapped",
        };
        format!("{what}: {cause}")
    } else {
        cause.to_string()
    };
    with_output(message, output)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
