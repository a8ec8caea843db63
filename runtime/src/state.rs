//! The data of one plugin instance's store: its WASI context (no files, no
//! environment, no sockets), its HTTP hooks, its limits and its grants.

use super::budget::{MemoryBudget, Use};
use super::capabilities::Capabilities;
use super::http::PluginHttp;
use super::stderr::GuestStderr;
use std::sync::Arc;
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
    pub(super) stderr: GuestStderr,
}

impl State {
    pub fn new(caps: Capabilities, hooks: PluginHttp, cpu_budget_ticks: u64) -> Self {
        // Nothing is inherited: no preopened directories, no environment, no
        // arguments, no sockets or name lookups; stdin and stdout are empty,
        // stderr is kept for the operator.
        let stderr = GuestStderr::default();
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let limits = Limits::new(caps.config.memory_bytes(), caps.budget.clone());
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
            stderr,
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

/// The store's limits, and what it holds of the plugin's memory budget:
/// linear memories and tables are reserved there as they grow and released
/// when the store is dropped. A memory never shrinks, so an instance that
/// grew large is not worth keeping.
pub(super) struct Limits {
    store: StoreLimits,
    budget: Arc<MemoryBudget>,
    memory_bytes: usize,
    table_bytes: usize,
    /// The last growth reserved, handed back if wasmtime then fails it.
    pending: Option<(Use, usize)>,
}

/// wasmtime stores a pointer per table element.
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

impl Limits {
    /// `memory_bytes`: the cap on one instance's linear memory.
    pub(super) fn new(memory_bytes: usize, budget: Arc<MemoryBudget>) -> Self {
        let store = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .instances(64)
            .tables(64)
            .memories(16)
            // A refused memory.grow otherwise surfaces as a guest `unreachable`.
            .trap_on_grow_failure(true)
            .build();
        Limits {
            store,
            budget,
            memory_bytes: 0,
            table_bytes: 0,
            pending: None,
        }
    }

    fn reserve(&mut self, what: Use, bytes: usize) -> wasmtime::Result<()> {
        self.budget
            .try_reserve(what, bytes)
            .map_err(wasmtime::Error::new)?;
        match what {
            Use::Table => self.table_bytes += bytes,
            _ => self.memory_bytes += bytes,
        }
        self.pending = Some((what, bytes));
        Ok(())
    }

    fn unreserve_pending(&mut self) {
        if let Some((what, bytes)) = self.pending.take() {
            self.budget.release(what, bytes);
            match what {
                Use::Table => self.table_bytes -= bytes,
                _ => self.memory_bytes -= bytes,
            }
        }
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        self.budget.release(Use::LinearMemory, self.memory_bytes);
        self.budget.release(Use::Table, self.table_bytes);
    }
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.store.memory_growing(current, desired, maximum)? {
            return Ok(false);
        }
        self.reserve(Use::LinearMemory, desired.saturating_sub(current))?;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.unreserve_pending();
        self.store.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.store.table_growing(current, desired, maximum)? {
            return Ok(false);
        }
        let bytes = desired
            .saturating_sub(current)
            .saturating_mul(TABLE_ELEMENT_BYTES);
        self.reserve(Use::Table, bytes)?;
        Ok(true)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.unreserve_pending();
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

impl super::bindings::v0_1_4::karpenter::provider::types::Host for State {}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module, Store};

    /// A module that grows its memory and its table on request.
    const GROWER: &str = r#"(module
        (memory 1)
        (table 1 funcref)
        (func (export "grow-memory") (param i32) (result i32) (memory.grow (local.get 0)))
        (func (export "grow-table") (param i32) (result i32)
            (table.grow 0 (ref.null func) (local.get 0))))"#;

    fn instance(engine: &Engine, budget: &Arc<MemoryBudget>) -> (Store<Limits>, Instance) {
        let mut store = Store::new(engine, Limits::new(64 << 20, budget.clone()));
        store.limiter(|l| l);
        let module = Module::new(engine, GROWER).expect("valid module");
        let instance = Instance::new(&mut store, &module, &[]).expect("instantiates");
        (store, instance)
    }

    fn grow(
        store: &mut Store<Limits>,
        instance: &Instance,
        what: &str,
        by: i32,
    ) -> wasmtime::Result<i32> {
        let f = instance.get_typed_func::<i32, i32>(&mut *store, what)?;
        f.call(store, by)
    }

    #[test]
    fn one_table_grow_cannot_take_the_host_past_the_budget() {
        let engine = Engine::default();
        let budget = Arc::new(MemoryBudget::new("hostile", 8 << 20));
        let (mut store, instance) = instance(&engine, &budget);
        let err = grow(&mut store, &instance, "grow-table", 1 << 28).expect_err("2 GiB of table");
        assert!(
            format!("{err:?}").contains("over its memory budget of 8 MiB"),
            "{err:?}"
        );
        assert!(budget.usage().total() < 8 << 20);
        // A small table still grows.
        let (mut store, instance) = self::instance(&engine, &budget);
        assert_eq!(
            grow(&mut store, &instance, "grow-table", 16).expect("fits"),
            1
        );
    }

    #[test]
    fn instances_share_one_budget_and_give_it_back_when_dropped() {
        let engine = Engine::default();
        let budget = Arc::new(MemoryBudget::new("hostile", 8 << 20));
        let (mut a, ia) = instance(&engine, &budget);
        // 96 pages (6 MiB) more: 7 MiB with the first page.
        assert_eq!(grow(&mut a, &ia, "grow-memory", 96).expect("fits"), 1);
        let (mut b, ib) = instance(&engine, &budget);
        let err = grow(&mut b, &ib, "grow-memory", 32).expect_err("past the budget");
        assert!(
            format!("{err:?}").contains("linear memory needs 2097152 more bytes"),
            "{err:?}"
        );
        drop(a);
        assert_eq!(grow(&mut b, &ib, "grow-memory", 32).expect("room again"), 1);
        drop(b);
        assert_eq!(budget.usage().total(), 0);
    }
}
