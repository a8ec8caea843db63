//! One plugin's memory budget: everything the host allocates because the
//! plugin asked for it (its instances' linear memories and tables, its cache
//! entries, its request bodies being buffered) is reserved here first, so a
//! plugin cannot make the host hold more than its `memoryBudgetMib`, whatever
//! it does.
//!
//! The budget is shared by every instance of the plugin and kept, like its
//! cache, across hot reloads of the same plugin name.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a reservation is for, so an over-budget error says where the memory went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    LinearMemory,
    Table,
    Cache,
    RequestBody,
}

impl Use {
    const ALL: [Use; 4] = [Use::LinearMemory, Use::Table, Use::Cache, Use::RequestBody];

    fn name(self) -> &'static str {
        match self {
            Use::LinearMemory => "linear memory",
            Use::Table => "tables",
            Use::Cache => "cache",
            Use::RequestBody => "request bodies",
        }
    }
}

pub struct MemoryBudget {
    plugin: String,
    limit: AtomicUsize,
    used: Mutex<[usize; 4]>,
}

/// A reservation that did not fit.
#[derive(Debug, thiserror::Error)]
#[error(
    "over its memory budget of {limit_mib} MiB (memoryBudgetMib): {what} needs {bytes} more bytes; in use: {usage}"
)]
pub struct OverBudget {
    pub limit_mib: usize,
    pub what: &'static str,
    pub bytes: usize,
    pub usage: Usage,
}

/// Bytes in use by kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage([usize; 4]);

impl Usage {
    pub fn total(&self) -> usize {
        self.0.iter().sum()
    }

    pub fn of(&self, what: Use) -> usize {
        self.0[what as usize]
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Use::ALL
            .iter()
            .map(|u| format!("{} {}", u.name(), mib(self.of(*u))))
            .collect();
        write!(f, "{}", parts.join(", "))
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

impl MemoryBudget {
    pub fn new(plugin: &str, limit_bytes: usize) -> Self {
        MemoryBudget {
            plugin: plugin.to_string(),
            limit: AtomicUsize::new(limit_bytes),
            used: Mutex::new([0; 4]),
        }
    }

    /// A reload may grant a different budget; what is held stays held.
    pub fn set_limit(&self, limit_bytes: usize) {
        self.limit.store(limit_bytes, Ordering::Relaxed);
    }

    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn try_reserve(&self, what: Use, bytes: usize) -> Result<(), OverBudget> {
        let limit = self.limit();
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = used.iter().sum();
        if total.saturating_add(bytes) > limit {
            return Err(OverBudget {
                limit_mib: limit >> 20,
                what: what.name(),
                bytes,
                usage: Usage(*used),
            });
        }
        used[what as usize] += bytes;
        Ok(())
    }

    pub fn release(&self, what: Use, bytes: usize) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut used[what as usize];
        *slot = slot.saturating_sub(bytes);
    }

    pub fn usage(&self) -> Usage {
        Usage(*self.used.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_refused_past_the_limit_and_name_what_holds_it() {
        let budget = MemoryBudget::new("cloud", 4 << 20);
        budget.try_reserve(Use::Cache, 3 << 20).expect("fits");
        let err = budget
            .try_reserve(Use::LinearMemory, 2 << 20)
            .expect_err("over");
        let text = err.to_string();
        assert!(
            text.starts_with("over its memory budget of 4 MiB"),
            "{text}"
        );
        assert!(text.contains("cache 3.0 MiB"), "{text}");
        budget.release(Use::Cache, 2 << 20);
        budget
            .try_reserve(Use::LinearMemory, 2 << 20)
            .expect("fits after release");
        assert_eq!(budget.usage().total(), 3 << 20);
    }
}
