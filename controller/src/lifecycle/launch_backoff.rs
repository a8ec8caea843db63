//! When each NodeClaim whose launch failed may be tried again. The failure
//! is written into the NodeClaim's status, and that write comes back as a
//! change that reconciles it at once: without this, a launch the provider
//! said to retry in a minute was retried within a second.

use super::launch_failure::Backoff;
use crate::crds::NodeClaim;
use crate::uid;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A NodeClaim not tried again for this long after it was due starts its
/// count over; it also bounds how long a deleted NodeClaim's entry stays.
const FORGET_AFTER: Duration = Duration::from_secs(600);

struct Failed {
    not_before: Instant,
    failures: u32,
}

/// Not-before instants and consecutive failures by NodeClaim UID.
#[derive(Default)]
pub struct LaunchBackoff(Mutex<HashMap<u128, Failed>>);

impl LaunchBackoff {
    /// The launch of `nc` failed again; returns how long it waits before
    /// the next try.
    pub fn failed(&self, nc: &NodeClaim, now: Instant, backoff: Backoff) -> Duration {
        let Some(uid) = nc.uid() else {
            return backoff.after(1);
        };
        let mut m = self.lock();
        m.retain(|_, f| f.not_before + FORGET_AFTER > now);
        let failures = m.get(&uid::key(&uid)).map_or(0, |f| f.failures) + 1;
        let wait = backoff.after(failures);
        m.insert(
            uid::key(&uid),
            Failed {
                not_before: now + wait,
                failures,
            },
        );
        wait
    }

    /// How long `nc` must still wait before its launch is tried again.
    pub fn remaining(&self, nc: &NodeClaim, now: Instant) -> Option<Duration> {
        let uid = nc.uid()?;
        let at = self.lock().get(&uid::key(&uid))?.not_before;
        Some(at.saturating_duration_since(now)).filter(|d| !d.is_zero())
    }

    pub fn forget(&self, nc: &NodeClaim) {
        if let Some(uid) = nc.uid() {
            self.lock().remove(&uid::key(&uid));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Failed>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "a", "uid": uid},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}
        }))
        .expect("claim")
    }

    #[test]
    fn a_failed_launch_waits_its_backoff_out() {
        let b = LaunchBackoff::default();
        let (a, other) = (
            claim("00000000-0000-0000-0000-000000000001"),
            claim("00000000-0000-0000-0000-000000000002"),
        );
        let t = Instant::now();
        let minute = Backoff::fixed(Duration::from_secs(60));
        assert_eq!(b.remaining(&a, t), None, "never failed");
        b.failed(&a, t, minute);
        assert_eq!(
            b.remaining(&a, t + Duration::from_secs(1)),
            Some(Duration::from_secs(59))
        );
        assert_eq!(b.remaining(&other, t), None);
        assert_eq!(b.remaining(&a, t + Duration::from_secs(60)), None, "due");
        b.forget(&a);
        assert_eq!(b.remaining(&a, t), None);
    }

    #[test]
    fn a_passing_fault_costs_a_second_and_repeated_ones_double_up_to_the_ceiling() {
        let b = LaunchBackoff::default();
        let a = claim("00000000-0000-0000-0000-000000000001");
        let backoff = Backoff {
            first: Duration::from_secs(1),
            most: Duration::from_secs(10),
        };
        let mut t = Instant::now();
        let waits: Vec<u64> = (0..6)
            .map(|_| {
                let w = b.failed(&a, t, backoff);
                t += w;
                w.as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        b.forget(&a);
        assert_eq!(
            b.failed(&a, t, backoff).as_secs(),
            1,
            "a launch starts over"
        );
        let later = t + FORGET_AFTER + Duration::from_secs(2);
        assert_eq!(
            b.failed(&a, later, backoff).as_secs(),
            1,
            "long after it was due, the count starts over"
        );
    }
}
