//! The progress this controller last wrote into each NodeClaim's status.
//!
//! Node events trigger reconciles too, and one can arrive before the watch
//! has delivered this controller's own status write. Acting on that stale
//! copy would make the same transition twice: two events, a metric counted
//! twice. Launched, Registered, Initialized and Ready never turn back from
//! True, so a stored copy that lacks one this controller wrote is stale.

use crate::crds::nodeclaim::conditions::{INITIALIZED, LAUNCHED, READY, REGISTERED};
use crate::crds::{NodeClaim, NodeClaimStatus};
use crate::{conditions, uid};
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Mutex;

const PROGRESS: [&str; 4] = [LAUNCHED, REGISTERED, INITIALIZED, READY];

/// One bit per condition of [`PROGRESS`] that is True, by NodeClaim UID.
#[derive(Default)]
pub struct Written(Mutex<HashMap<u128, u8>>);

impl Written {
    /// Whether `status` (the store's copy) lacks progress already written.
    pub fn is_stale(&self, nc: &NodeClaim, status: &NodeClaimStatus) -> bool {
        let Some(uid) = nc.uid() else { return false };
        let written = self.lock().get(&uid::key(&uid)).copied().unwrap_or(0);
        written & !progress(status) != 0
    }

    pub fn record(&self, nc: &NodeClaim, status: &NodeClaimStatus) {
        if let Some(uid) = nc.uid() {
            self.lock().insert(uid::key(&uid), progress(status));
        }
    }

    pub fn forget(&self, nc: &NodeClaim) {
        if let Some(uid) = nc.uid() {
            self.lock().remove(&uid::key(&uid));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u128, u8>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn progress(status: &NodeClaimStatus) -> u8 {
    PROGRESS
        .iter()
        .enumerate()
        .filter(|(_, t)| conditions::is_true(&status.conditions, t))
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str) -> NodeClaim {
        let mut nc: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "a", "uid": uid},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}
        }))
        .expect("claim");
        nc.status = Some(NodeClaimStatus::default());
        nc
    }

    fn with(types: &[&str]) -> NodeClaimStatus {
        let mut s = NodeClaimStatus::default();
        for t in types {
            conditions::set(&mut s.conditions, t, "True", "Test", "", None);
        }
        s
    }

    #[test]
    fn a_copy_behind_the_last_write_is_stale_until_it_catches_up() {
        let written = Written::default();
        let nc = claim("5f0c7e0e-0000-4000-8000-00000000002a");
        assert!(!written.is_stale(&nc, &with(&[])), "nothing written yet");
        written.record(&nc, &with(&[LAUNCHED, REGISTERED]));
        assert!(written.is_stale(&nc, &with(&[LAUNCHED])));
        assert!(!written.is_stale(&nc, &with(&[LAUNCHED, REGISTERED])));
        assert!(!written.is_stale(&nc, &with(&[LAUNCHED, REGISTERED, INITIALIZED])));
        let other = claim("5f0c7e0e-0000-4000-8000-00000000002b");
        assert!(!written.is_stale(&other, &with(&[])), "per NodeClaim");
        written.forget(&nc);
        assert!(!written.is_stale(&nc, &with(&[])));
    }
}
