//! When each NodeClaim whose launch failed may be tried again. The failure
//! is written into the NodeClaim's status, and that write comes back as a
//! change that reconciles it at once: without this, a launch the provider
//! said to retry in a minute was retried within a second.

use crate::crds::NodeClaim;
use crate::uid;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Not-before instants by NodeClaim UID.
#[derive(Default)]
pub struct LaunchBackoff(Mutex<HashMap<u128, Instant>>);

impl LaunchBackoff {
    /// The launch of `nc` failed; the next try is not before `now + after`.
    pub fn failed(&self, nc: &NodeClaim, now: Instant, after: Duration) {
        if let Some(uid) = nc.uid() {
            let mut m = self.lock();
            m.retain(|_, t| *t > now);
            m.insert(uid::key(&uid), now + after);
        }
    }

    /// How long `nc` must still wait before its launch is tried again.
    pub fn remaining(&self, nc: &NodeClaim, now: Instant) -> Option<Duration> {
        let uid = nc.uid()?;
        let at = *self.lock().get(&uid::key(&uid))?;
        Some(at.saturating_duration_since(now)).filter(|d| !d.is_zero())
    }

    pub fn forget(&self, nc: &NodeClaim) {
        if let Some(uid) = nc.uid() {
            self.lock().remove(&uid::key(&uid));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Instant>> {
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
        assert_eq!(b.remaining(&a, t), None, "never failed");
        b.failed(&a, t, Duration::from_secs(60));
        assert_eq!(
            b.remaining(&a, t + Duration::from_secs(1)),
            Some(Duration::from_secs(59))
        );
        assert_eq!(b.remaining(&other, t), None);
        assert_eq!(b.remaining(&a, t + Duration::from_secs(60)), None, "due");
        b.forget(&a);
        assert_eq!(b.remaining(&a, t), None);
    }
}
