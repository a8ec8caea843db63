//! Nodes and NodeClaims the provisioner just planned pending pods onto.
//! Disruption leaves them alone for a while: the pods are on their way, and
//! an empty-looking node that is about to receive them is not empty.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a nomination holds: two maximum batch windows, as in Karpenter.
const HOLD: Duration = Duration::from_secs(20);

#[derive(Default)]
pub struct Nominations {
    until: Mutex<HashMap<String, Instant>>,
}

impl Nominations {
    pub fn nominate(&self, name: &str, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.retain(|_, t| *t > now);
        until.insert(name.to_string(), now + HOLD);
    }

    /// The names whose nomination still holds at `now`.
    pub fn current(&self, now: Instant) -> BTreeSet<String> {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_holds_for_twenty_seconds() {
        let n = Nominations::default();
        let t = Instant::now();
        n.nominate("a", t);
        assert!(n.current(t + Duration::from_secs(19)).contains("a"));
        assert!(n.current(t + Duration::from_secs(21)).is_empty());
    }
}
