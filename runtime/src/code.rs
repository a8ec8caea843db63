//! The compiled code a plugin's calls run on. A plugin that is not in the
//! precompiled cache starts on Winch's quick compile (see `runtime.rs`), and
//! its slot takes Cranelift's optimized code once, when the background
//! compile finishes; instances made from the quick code are dropped then.
//! A small plugin's slot counts the CPU its calls spend on the quick code,
//! and holds what to compile from until that is enough to be worth it.

use super::bindings::catalog::GuestIndices as CatalogIndices;
use super::bindings::catalog_table::GuestIndices as TableIndices;
use super::bindings::interruption::GuestIndices as InterruptionIndices;
use super::bindings::v0_1_4::ProviderPluginPre;
use super::state::State;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use wasmtime::component::{Component, Linker};

pub(super) struct Code {
    pub component: Component,
    pub pre: ProviderPluginPre<State>,
    /// Where the optional compact `catalog` export is, when the plugin has it.
    pub catalog: Option<CatalogIndices>,
    /// Where the optional `catalog-table` export is, when the plugin has it.
    pub table: Option<TableIndices>,
    /// Where the optional `interruption` export is, when the plugin has it.
    pub interruption: Option<InterruptionIndices>,
    pub optimized: bool,
}

pub(super) struct CodeSlot {
    code: RwLock<Arc<Code>>,
    /// Epoch ticks calls have spent on the quick code.
    quick_ticks: AtomicU64,
    /// The ticks after which to optimize; `u64::MAX` when there is nothing
    /// (left) to: a call on the quick code compares before it locks.
    hot_at: AtomicU64,
    /// What Cranelift compiles from once `quick_ticks` reaches `hot_at`;
    /// taken once.
    tier_up: Mutex<Option<TierUp>>,
}

/// The plugin as loaded, for its optimized compile.
pub(super) struct TierUp {
    pub wasm: Vec<u8>,
    pub sha256: String,
}

impl CodeSlot {
    /// `linker` must belong to the component's engine.
    pub fn new(
        linker: &Linker<State>,
        component: Component,
        optimized: bool,
    ) -> anyhow::Result<Self> {
        Ok(CodeSlot {
            code: RwLock::new(Arc::new(code(linker, component, optimized)?)),
            quick_ticks: AtomicU64::new(0),
            hot_at: AtomicU64::new(u64::MAX),
            tier_up: Mutex::new(None),
        })
    }

    pub fn current(&self) -> Arc<Code> {
        self.code.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Holds what to optimize from until calls have spent `ticks` on the
    /// quick code.
    pub fn optimize_when_hot(&self, from: TierUp, ticks: u64) {
        *self.tier_up.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
        self.hot_at.store(ticks, Ordering::Release);
    }

    /// Counts an epoch tick a call spent on the quick code.
    pub fn spent_quick_tick(&self) {
        self.quick_ticks.fetch_add(1, Ordering::Relaxed);
    }

    /// What to optimize from, once, when the quick code has been used enough.
    pub fn take_when_hot(&self) -> Option<TierUp> {
        if self.quick_ticks.load(Ordering::Relaxed) < self.hot_at.load(Ordering::Acquire) {
            return None;
        }
        self.hot_at.store(u64::MAX, Ordering::Release);
        self.tier_up
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Puts the optimized component in place for every later instance.
    pub fn optimize(&self, linker: &Linker<State>, component: Component) -> anyhow::Result<()> {
        let code = Arc::new(code(linker, component, true)?);
        *self.code.write().unwrap_or_else(|e| e.into_inner()) = code;
        Ok(())
    }
}

fn code(linker: &Linker<State>, component: Component, optimized: bool) -> anyhow::Result<Code> {
    let instance_pre = linker.instantiate_pre(&component)?;
    let catalog = CatalogIndices::new(&instance_pre).ok();
    let table = TableIndices::new(&instance_pre).ok();
    let interruption = InterruptionIndices::new(&instance_pre).ok();
    let pre = ProviderPluginPre::new(instance_pre)?;
    Ok(Code {
        component,
        pre,
        catalog,
        table,
        interruption,
        optimized,
    })
}
