//! The nodes that disruption commands being carried out hold. Commands run
//! beside the passes, as Karpenter's orchestration queue runs them, so a
//! replacement's minutes of startup do not hold up every other drifted
//! node. A command holds its candidates from the moment it taints them until
//! their NodeClaims are deleted or it gives up; meanwhile the passes see
//! them as deleting (not candidates again, counted against the budgets) and
//! leave their taint alone.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default, Clone)]
pub struct InFlight(Arc<Mutex<BTreeSet<String>>>);

/// A command's hold on its candidates, released when dropped, however the
/// command ends (finished, failed, or aborted with its task).
pub struct Held {
    set: InFlight,
    names: Vec<String>,
}

impl InFlight {
    pub fn hold(&self, names: &[String]) -> Held {
        self.lock().extend(names.iter().cloned());
        Held {
            set: self.clone(),
            names: names.to_vec(),
        }
    }

    pub fn names(&self) -> BTreeSet<String> {
        self.lock().clone()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.lock().contains(name)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut set = self.set.lock();
        for name in &self.names {
            set.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_lasts_as_long_as_its_command() {
        let in_flight = InFlight::default();
        let first = in_flight.hold(&["a".into(), "b".into()]);
        let second = in_flight.hold(&["c".into()]);
        assert_eq!(in_flight.names(), ["a", "b", "c"].map(String::from).into());
        drop(first);
        assert!(!in_flight.contains("a") && !in_flight.contains("b"));
        assert!(in_flight.contains("c"));
        drop(second);
        assert!(in_flight.names().is_empty());
    }
}
