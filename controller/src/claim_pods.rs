//! The pods each new NodeClaim was made for, until it launches, so a launch
//! that fails tells those pods why: they are what the user is looking at.

use crate::slim::Pod;
use kube::api::ObjectMeta;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A NodeClaim deleted before it launched leaves its entry; entries older
/// than this are dropped when others are added.
const KEEP: Duration = Duration::from_secs(15 * 60);

/// At most this many pods per NodeClaim are told: the rest learn the same
/// from `karpenter explain pod`.
const PODS_PER_CLAIM: usize = 50;

#[derive(Default)]
pub struct ClaimPods {
    claims: Mutex<HashMap<String, (Instant, Vec<Pod>)>>,
}

impl ClaimPods {
    /// Records that `pod` waits for NodeClaim `claim`; only what an event
    /// needs of the pod is kept.
    pub fn add(&self, claim: &str, pod: &Pod, now: Instant) {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        if !claims.contains_key(claim) {
            claims.retain(|_, (at, _)| now.saturating_duration_since(*at) < KEEP);
        }
        let (_, pods) = claims
            .entry(claim.to_string())
            .or_insert_with(|| (now, Vec::new()));
        if pods.len() < PODS_PER_CLAIM {
            pods.push(Pod {
                metadata: ObjectMeta {
                    name: pod.metadata.name.clone(),
                    namespace: pod.metadata.namespace.clone(),
                    uid: pod.metadata.uid.clone(),
                    ..ObjectMeta::default()
                },
                ..Pod::default()
            });
        }
    }

    /// The pods NodeClaim `claim` was made for, forgotten from here on.
    pub fn take(&self, claim: &str) -> Vec<Pod> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        claims
            .remove(claim)
            .map(|(_, pods)| pods)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some([("app".to_string(), "x".to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn a_claim_gives_its_pods_once_and_forgets_stale_claims() {
        let c = ClaimPods::default();
        let t = Instant::now();
        c.add("a", &pod("p1"), t);
        c.add("a", &pod("p2"), t);
        c.add("b", &pod("p3"), t);
        let a = c.take("a");
        assert_eq!(
            a.iter()
                .map(|p| p.metadata.name.as_deref().unwrap_or_default())
                .collect::<Vec<_>>(),
            ["p1", "p2"]
        );
        assert!(a[0].metadata.labels.is_none(), "only the reference is kept");
        assert!(c.take("a").is_empty());
        c.add("c", &pod("p4"), t + KEEP + Duration::from_secs(1));
        assert!(c.take("b").is_empty(), "b outlived KEEP");
        assert_eq!(c.take("c").len(), 1);
    }

    #[test]
    fn a_claim_keeps_a_bounded_number_of_pods() {
        let c = ClaimPods::default();
        let t = Instant::now();
        for i in 0..PODS_PER_CLAIM + 10 {
            c.add("a", &pod(&format!("p{i}")), t);
        }
        assert_eq!(c.take("a").len(), PODS_PER_CLAIM);
    }
}
