//! The data of one plugin instance's store: its WASI context (no files, no
//! environment, no sockets), its HTTP hooks, its limits and its grants.

use super::capabilities::Capabilities;
use super::http::PluginHttp;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

pub struct State {
    pub caps: Capabilities,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: PluginHttp,
    table: ResourceTable,
    pub(super) limits: Limits,
    pub(super) cpu: CpuBudget,
}

impl State {
    pub fn new(caps: Capabilities, hooks: PluginHttp, cpu_budget_ticks: u64) -> Self {
        // Nothing is inherited: no preopened directories, no environment, no
        // arguments, stdio discarded, no sockets or name lookups.
        let wasi = WasiCtx::builder()
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(caps.config.memory_bytes())
            .instances(64)
            .tables(64)
            .memories(16)
            // A refused memory.grow otherwise surfaces as a guest `unreachable`.
            .trap_on_grow_failure(true)
            .build();
        let limits = Limits {
            store: store_limits,
            memory_bytes: 0,
        };
        State {
            caps,
            wasi,
            http: WasiHttpCtx::new(),
            hooks,
            table: ResourceTable::new(),
            limits,
            cpu: CpuBudget {
                used_ticks: 0,
                budget_ticks: cpu_budget_ticks,
            },
        }
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limits
    }

    /// The instance's linear memory now, in bytes (all its memories).
    pub(super) fn memory_bytes(&self) -> usize {
        self.limits.memory_bytes
    }
}

/// The store's limits, and how much linear memory the instance holds: a
/// memory never shrinks, so an instance that grew large is not worth keeping.
pub(super) struct Limits {
    store: StoreLimits,
    memory_bytes: usize,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.store.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memory_bytes = self.memory_bytes.saturating_add(desired - current);
        }
        Ok(allowed)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.store.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.store.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.store.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.store.instances()
    }

    fn tables(&self) -> usize {
        self.store.tables()
    }

    fn memories(&self) -> usize {
        self.store.memories()
    }
}

/// CPU time is counted in epoch ticks seen while guest code runs: the epoch
/// deadline is re-armed one tick ahead each time it fires, so a tick spent
/// waiting on the host (HTTP) costs at most one tick.
pub struct CpuBudget {
    pub used_ticks: u64,
    pub budget_ticks: u64,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl super::bindings::v0_1_0::karpenter::provider::types::Host for State {}
