//! One loaded plugin: its compiled component, a pool of warm instances and
//! the typed calls of the contract.
//!
//! Every call runs on an instance of its own (concurrent calls never wait for
//! each other), under the plugin's memory cap, CPU budget and wall-clock
//! limit. An instance that traps, times out or returns garbage is dropped; the
//! next call gets a fresh one.

use super::bindings::v0_1_0::{ProviderPlugin, ProviderPluginPre};
use super::bindings::wit;
use super::capabilities::Capabilities;
use super::http::PluginHttp;
use super::metrics::CallMetrics;
use super::runtime::{Runtime, TICK};
use super::state::State;
use super::validate;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

/// Warm instances kept per plugin; beyond this, finished ones are dropped.
const MAX_WARM: usize = 8;
/// An instance whose linear memory grew past this (a large list, say) is
/// dropped after its call rather than kept warm: memories never shrink.
/// Plugins built with Rust's defaults start at 1.06 MiB (a 1 MiB stack and
/// their data). At 4 MiB, the instance that had listed 1,000 kwok Nodes
/// (about 3 MiB, in pages of 50) was kept, and its memory stayed resident.
const MAX_WARM_MEMORY: usize = 2 << 20;

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

struct Warm {
    store: Store<State>,
    bindings: ProviderPlugin,
}

pub struct Plugin {
    pub name: String,
    pub sha256: String,
    pub size: usize,
    pub contract_version: String,
    pub metadata: wit::ProviderMetadata,
    component: Component,
    pre: ProviderPluginPre<State>,
    caps: Capabilities,
    runtime: Arc<Runtime>,
    warm: Mutex<Vec<Warm>>,
    /// Permits for live instances (`maxInstances`).
    instances: tokio::sync::Semaphore,
    metrics: CallMetrics,
}

impl Plugin {
    pub(super) async fn new(
        runtime: Arc<Runtime>,
        caps: Capabilities,
        component: Component,
        sha256: String,
        size: usize,
        contract_version: String,
    ) -> anyhow::Result<Self> {
        let pre = ProviderPluginPre::new(runtime.linker.instantiate_pre(&component)?)?;
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
            component,
            pre,
            caps,
            runtime,
            warm: Mutex::new(Vec::new()),
            instances,
            metrics,
        };
        let metadata = plugin
            .call("metadata", async |s, b| {
                b.karpenter_provider_provider().call_metadata(s).await
            })
            .await?;
        validate::metadata(&metadata)?;
        plugin.metadata = metadata;
        Ok(plugin)
    }

    pub fn component(&self) -> &Component {
        &self.component
    }

    /// Whether this plugin serves NodeClasses of `group`/`kind`.
    pub fn serves(&self, group: &str, kind: &str) -> bool {
        self.metadata
            .node_classes
            .iter()
            .any(|k| k.group == group && k.kind == kind)
    }

    async fn instantiate(&self) -> anyhow::Result<Warm> {
        let config = &self.caps.config;
        let hooks = PluginHttp {
            plugin: self.caps.plugin.clone(),
            allow: Arc::new(config.allow_list()?),
            h2c_hosts: Arc::new(config.h2c_hosts.iter().cloned().collect::<BTreeSet<_>>()),
            clients: self.runtime.http.clone(),
        };
        let budget = (config.cpu_ms as u128 * 1000 / TICK.as_micros()).max(1) as u64;
        let mut store = Store::new(
            &self.runtime.engine,
            State::new(self.caps.clone(), hooks, budget),
        );
        store.limiter(|s| s.limiter());
        store.epoch_deadline_callback(|mut ctx| {
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
        let bindings = self.pre.instantiate_async(&mut store).await?;
        Ok(Warm { store, bindings })
    }

    /// Runs `f` on a warm (or new) instance within the plugin's limits.
    async fn call<R>(
        &self,
        call: &'static str,
        f: impl AsyncFnOnce(&mut Store<State>, &ProviderPlugin) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let start = Instant::now();
        let failed = |message: String| CallError::Failed {
            plugin: self.name.clone(),
            call,
            message,
        };
        // Never closed, so acquiring only waits.
        let _permit = self.instances.acquire().await;
        let pooled = self.warm.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut warm = match pooled {
            Some(w) => w,
            None => self.instantiate().await.map_err(|e| {
                self.metrics
                    .observe(call, start.elapsed(), Some("instantiate"));
                failed(format!("cannot instantiate: {e:#}"))
            })?,
        };
        warm.store.data_mut().cpu.used_ticks = 0;
        warm.store.set_epoch_deadline(1);
        let Warm { store, bindings } = &mut warm;
        let outcome =
            tokio::time::timeout(self.caps.config.call_timeout(), f(store, bindings)).await;
        let elapsed = start.elapsed();
        match outcome {
            Ok(Ok(value)) => {
                self.metrics.observe(call, elapsed, None);
                let mut pool = self.warm.lock().unwrap_or_else(|e| e.into_inner());
                if pool.len() < MAX_WARM && warm.store.data().memory_bytes() <= MAX_WARM_MEMORY {
                    pool.push(warm);
                }
                Ok(value)
            }
            Ok(Err(trap)) => {
                self.metrics.observe(call, elapsed, Some("trap"));
                let message = trap_message(&trap);
                tracing::warn!(plugin = %self.name, call, error = %message, "plugin call failed; its instance is discarded");
                Err(failed(message))
            }
            Err(_) => {
                self.metrics.observe(call, elapsed, Some("timeout"));
                Err(failed(format!(
                    "did not finish within {} s",
                    self.caps.config.call_timeout_seconds
                )))
            }
        }
    }

    /// Turns the contract's `result<T, error>` into ours, counting typed errors.
    fn typed<T>(&self, call: &'static str, r: Result<T, wit::Error>) -> Result<T, CallError> {
        r.map_err(|error| {
            let kind = match &error {
                wit::Error::InsufficientCapacity(_) => "insufficient-capacity",
                wit::Error::NodeClassNotReady(_) => "node-class-not-ready",
                wit::Error::NotFound(_) => "not-found",
                wit::Error::CreateError(_) => "create-error",
                wit::Error::Other(_) => "other",
            };
            self.metrics.error(call, kind);
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
            b.karpenter_provider_provider().call_metadata(s).await
        })
        .await
    }

    pub async fn validate_node_class(
        &self,
        class: &wit::NodeClass,
    ) -> Result<wit::NodeClassStatus, CallError> {
        const CALL: &str = "validate-node-class";
        let r = self.call(CALL, async |s, b| {
            b.karpenter_provider_provider()
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
    ) -> Result<Vec<wit::InstanceType>, CallError> {
        const CALL: &str = "get-instance-types";
        let r = self.call(CALL, async |s, b| {
            b.karpenter_provider_provider()
                .call_get_instance_types(s, pool, class)
                .await
        });
        let types = self.typed(CALL, r.await?)?;
        validate::instance_types(&types).map_err(|e| self.invalid(CALL, e))?;
        Ok(types)
    }

    /// get-instance-types without the host's checks: the conformance kit
    /// reports every problem, where a call stops at the first.
    pub async fn get_instance_types_unchecked(
        &self,
        pool: &wit::NodePool,
        class: &wit::NodeClass,
    ) -> Result<Vec<wit::InstanceType>, CallError> {
        const CALL: &str = "get-instance-types";
        let r = self.call(CALL, async |s, b| {
            b.karpenter_provider_provider()
                .call_get_instance_types(s, pool, class)
                .await
        });
        self.typed(CALL, r.await?)
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
            b.karpenter_provider_provider()
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
            b.karpenter_provider_provider().call_delete(s, claim).await
        });
        self.typed(CALL, r.await?)
    }

    pub async fn get(&self, provider_id: &str) -> Result<wit::Instance, CallError> {
        const CALL: &str = "get";
        let r = self.call(CALL, async |s, b| {
            b.karpenter_provider_provider()
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
            b.karpenter_provider_provider().call_list_instances(s).await
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
            b.karpenter_provider_provider()
                .call_is_drifted(s, claim, class)
                .await
        });
        self.typed(CALL, r.await?)
    }

    pub async fn repair_policies(&self) -> Result<Vec<wit::RepairPolicy>, CallError> {
        self.call("repair-policies", async |s, b| {
            b.karpenter_provider_provider()
                .call_repair_policies(s)
                .await
        })
        .await
    }
}

/// A trap's message without wasmtime's backtrace noise: what happened, then
/// the root cause.
fn trap_message(e: &wasmtime::Error) -> String {
    let cause = e.root_cause().to_string();
    let cause = first_line(&cause);
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        let what = match trap {
            wasmtime::Trap::UnreachableCodeReached => "panicked (wasm `unreachable` trap)",
            wasmtime::Trap::Interrupt => "was interrupted",
            wasmtime::Trap::MemoryOutOfBounds => "accessed memory out of bounds",
            wasmtime::Trap::StackOverflow => "overflowed its stack",
            _ => "trapped",
        };
        return format!("{what}: {cause}");
    }
    if cause.contains("forcing a memory growth failure") || cause.contains("memory minimum size") {
        return format!("exceeded its memory limit: {cause}");
    }
    cause.to_string()
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}
