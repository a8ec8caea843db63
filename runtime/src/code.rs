//! The compiled code a plugin's calls run on. A large plugin that is not in
//! the precompiled cache starts on Winch's quick compile (see `runtime.rs`),
//! and its slot takes Cranelift's optimized code once, when the background
//! compile finishes; instances made from the quick code are dropped then.

use super::bindings::catalog::GuestIndices as CatalogIndices;
use super::bindings::catalog_table::GuestIndices as TableIndices;
use super::bindings::interruption::GuestIndices as InterruptionIndices;
use super::bindings::v0_1_4::ProviderPluginPre;
use super::state::State;
use std::sync::{Arc, RwLock};
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

pub(super) struct CodeSlot(RwLock<Arc<Code>>);

impl CodeSlot {
    /// `linker` must belong to the component's engine.
    pub fn new(
        linker: &Linker<State>,
        component: Component,
        optimized: bool,
    ) -> anyhow::Result<Self> {
        Ok(CodeSlot(RwLock::new(Arc::new(code(
            linker, component, optimized,
        )?))))
    }

    pub fn current(&self) -> Arc<Code> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts the optimized component in place for every later instance.
    pub fn optimize(&self, linker: &Linker<State>, component: Component) -> anyhow::Result<()> {
        let code = Arc::new(code(linker, component, true)?);
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = code;
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
