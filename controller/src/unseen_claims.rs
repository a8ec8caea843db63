//! NodeClaims a batch created that the store has not shown yet.
//!
//! The next batch plans on the store. Without a NodeClaim just created, the
//! pods it was made for look as if nothing had been planned for them and get
//! NodeClaims again; a loaded API server delivers a thousand creates seconds
//! late. So a batch waits until the store holds what earlier batches
//! created, as Karpenter waits for its cluster state to sync. The wait per
//! NodeClaim is bounded: one deleted by someone else before the store saw it
//! never arrives.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a created NodeClaim may stay unseen before batches stop
/// waiting for it.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct UnseenClaims(Mutex<BTreeMap<String, Instant>>);

impl UnseenClaims {
    pub fn created(&self, names: impl IntoIterator<Item = String>, now: Instant) {
        self.lock().extend(names.into_iter().map(|n| (n, now)));
    }

    /// The store has shown NodeClaim `name`: it is not awaited, even if it
    /// is gone again before the next batch looks (a launch that found no
    /// capacity deletes its NodeClaim at once).
    pub fn seen(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Forgets the NodeClaims `in_store` holds and those waited for longer
    /// than [`MAX_WAIT`]; returns how many are still awaited.
    pub fn awaited(&self, in_store: impl Fn(&str) -> bool, now: Instant) -> usize {
        let mut unseen = self.lock();
        unseen.retain(|name, created| {
            let waited = now.saturating_duration_since(*created);
            if waited >= MAX_WAIT && !in_store(name) {
                tracing::warn!(nodeclaim = %name, "a created NodeClaim never reached the store; provisioning goes on without it");
                return false;
            }
            !in_store(name)
        });
        unseen.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_waits_for_the_claims_created_before_it_and_no_longer_than_the_bound() {
        let unseen = UnseenClaims::default();
        let t0 = Instant::now();
        assert_eq!(unseen.awaited(|_| false, t0), 0, "nothing created");
        unseen.created(["a".to_string(), "b".to_string()], t0);
        assert_eq!(unseen.awaited(|n| n == "a", t0), 1, "b is not in the store");
        assert_eq!(
            unseen.awaited(|_| false, t0 + Duration::from_secs(1)),
            1,
            "a stays seen"
        );
        assert_eq!(unseen.awaited(|n| n == "b", t0 + Duration::from_secs(2)), 0);

        unseen.created(["gone".to_string()], t0);
        unseen.seen("gone");
        assert_eq!(
            unseen.awaited(|_| false, t0),
            0,
            "seen, then deleted before the batch looked"
        );

        unseen.created(["lost".to_string()], t0);
        assert_eq!(
            unseen.awaited(|_| false, t0 + MAX_WAIT - Duration::from_millis(1)),
            1
        );
        assert_eq!(
            unseen.awaited(|_| false, t0 + MAX_WAIT),
            0,
            "never arrives: not waited for"
        );
    }
}
