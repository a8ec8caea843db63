//! Kubernetes Events on NodeClaims, Nodes and pods, in Karpenter's words.
//! The same event on the same object is published once per two minutes, as
//! Karpenter's recorder does, a pod's nomination once per two minutes
//! whichever node it names, and a decision (a pod that cannot be scheduled,
//! a node kept from disruption) only when it changes, so a pending pod does
//! not get one event per batch, nor a kept node one per disruption pass.
//!
//! What is remembered is a hash per event, not the event: kube's recorder
//! keeps every event it sent for six minutes, which at 10,000 pods was tens
//! of megabytes, so each publish uses a recorder of its own.

use super::uid;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Karpenter's dedupe window for identical events.
const DEDUPE: Duration = Duration::from_secs(120);
/// Decisions remembered before the memory starts afresh.
const MAX_REMEMBERED: usize = 100_000;
/// Pod nominations published per second and in a burst, past which they are
/// dropped: Karpenter's rate for them. A scale-out of thousands of pods would
/// otherwise write thousands of events the API server stores for an hour.
const NOMINATIONS_PER_SECOND: f64 = 5.0;
const NOMINATION_BURST: f64 = 10.0;
const NOMINATED: &str = "Nominated";

pub struct Events {
    client: Client,
    reporter: Reporter,
    /// Hash of (object, type, reason, note) to when it was last published.
    recent: Mutex<Recent>,
    /// Object uid (as [`uid::key`]) to the hash of the last decision
    /// published for it.
    decisions: Mutex<HashMap<u128, u64>>,
    nominations: Mutex<TokenBucket>,
}

/// `rate` tokens a second, up to `burst`; an event takes one or is dropped.
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Option<Instant>,
}

impl TokenBucket {
    fn new(rate: f64, burst: f64) -> Self {
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            at: None,
        }
    }

    fn try_take(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * self.rate;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Default)]
struct Recent {
    published: HashMap<u64, Instant>,
    /// Size after the last prune; the next prune comes at twice this.
    pruned_at: usize,
}

impl Recent {
    fn within_window(&self, key: u64, now: Instant) -> bool {
        self.published
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < DEDUPE)
    }

    fn record(&mut self, key: u64, now: Instant) {
        self.published.insert(key, now);
        if self.published.len() >= self.pruned_at {
            self.published
                .retain(|_, at| now.duration_since(*at) < DEDUPE);
            self.pruned_at = (self.published.len() * 2).max(1024);
        }
    }
}

fn hash_of(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl Events {
    pub fn new(client: Client, instance: &str) -> Self {
        Events {
            client,
            reporter: Reporter {
                controller: "karpenter".into(),
                instance: Some(instance.to_string()),
            },
            recent: Mutex::default(),
            decisions: Mutex::default(),
            nominations: Mutex::new(TokenBucket::new(NOMINATIONS_PER_SECOND, NOMINATION_BURST)),
        }
    }

    pub async fn normal<K: Resource<DynamicType = ()>>(&self, obj: &K, reason: &str, note: String) {
        self.publish(obj, EventType::Normal, reason, note).await;
    }

    pub async fn warning<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        note: String,
    ) {
        self.publish(obj, EventType::Warning, reason, note).await;
    }

    async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let uid = obj.meta().uid.as_deref().unwrap_or_default();
        let kind = if type_ == EventType::Warning {
            "W"
        } else {
            "N"
        };
        let key = hash_of(&[uid, kind, reason, &note]);
        if self.first_in_window(key, Instant::now(), |_| true) {
            self.send(obj, type_, reason, note).await;
        }
    }

    async fn send<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(reason, error = %e, "event not published");
        }
    }

    /// Whether an event with this hash was not published within [`DEDUPE`]
    /// of `now` and `admit` lets it through; records it as published now if
    /// so. One `admit` refuses is not remembered, so a later call may
    /// publish it.
    fn first_in_window(&self, key: u64, now: Instant, admit: impl FnOnce(Instant) -> bool) -> bool {
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.within_window(key, now) || !admit(now) {
            return false;
        }
        recent.record(key, now);
        true
    }

    /// Publishes a pod's nomination unless the pod had one within
    /// [`DEDUPE`], whichever node it named (Karpenter dedupes them by pod
    /// alone), or nominations are over their rate.
    pub async fn nomination<K: Resource<DynamicType = ()>>(&self, pod: &K, note: String) {
        let uid = pod.meta().uid.as_deref().unwrap_or_default();
        if self.nomination_due(hash_of(&[uid, NOMINATED]), Instant::now()) {
            self.send(pod, EventType::Normal, NOMINATED, note).await;
        }
    }

    fn nomination_due(&self, key: u64, now: Instant) -> bool {
        self.first_in_window(key, now, |now| {
            let mut bucket = self.nominations.lock().unwrap_or_else(|e| e.into_inner());
            bucket.try_take(now)
        })
    }

    /// Publishes a decision about an object (a pod that cannot be
    /// scheduled, a node kept from disruption) unless it is the one
    /// published last for it.
    pub async fn decision<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let uid = uid::key(obj.meta().uid.as_deref().unwrap_or_default());
        let key = hash_of(&[reason, &note]);
        {
            let mut seen = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
            if seen.get(&uid) == Some(&key) {
                return;
            }
            if seen.len() >= MAX_REMEMBERED {
                seen.clear();
            }
            seen.insert(uid, key);
        }
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.publish(obj, type_, reason, note).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominations_past_the_burst_wait_for_the_rate() {
        let mut bucket = TokenBucket::new(NOMINATIONS_PER_SECOND, NOMINATION_BURST);
        let start = Instant::now();
        let burst = (0..100).filter(|_| bucket.try_take(start)).count();
        assert_eq!(
            burst, 10,
            "a burst of ten, then nothing at the same instant"
        );
        let later = start + Duration::from_secs(2);
        let refilled = (0..100).filter(|_| bucket.try_take(later)).count();
        assert_eq!(refilled, 10, "two seconds at five a second");
        let much_later = later + Duration::from_secs(3600);
        let capped = (0..100).filter(|_| bucket.try_take(much_later)).count();
        assert_eq!(capped, 10, "an idle hour refills to the burst, no more");
    }

    #[tokio::test]
    async fn a_pod_is_nominated_once_per_window_whichever_node_it_names() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let events = Events::new(Client::try_from(config).expect("a client"), "test");
        let t0 = Instant::now();
        let pod = |uid: &str| hash_of(&[uid, NOMINATED]);
        assert!(events.nomination_due(pod("uid-1"), t0));
        assert!(
            !events.nomination_due(pod("uid-1"), t0 + Duration::from_secs(60)),
            "a second batch naming another node publishes nothing"
        );
        assert!(events.nomination_due(pod("uid-1"), t0 + DEDUPE + Duration::from_secs(1)));
        // The burst spent at one instant: the rest wait for the rate and are
        // not remembered, so a later batch publishes them.
        let at = t0 + Duration::from_secs(3600);
        let burst: Vec<bool> = (0..12)
            .map(|i| events.nomination_due(pod(&format!("burst-{i}")), at))
            .collect();
        assert_eq!(burst.iter().filter(|due| **due).count(), 10);
        assert!(events.nomination_due(pod("burst-11"), at + Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn the_same_event_is_published_once_per_window() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
        let events = Events::new(Client::try_from(config).expect("a client"), "test");
        let t0 = Instant::now();
        let a = hash_of(&["uid-1", "N", "Launched", "note"]);
        let b = hash_of(&["uid-2", "N", "Launched", "note"]);
        let first = |key, at| events.first_in_window(key, at, |_| true);
        assert!(first(a, t0));
        assert!(!first(a, t0 + Duration::from_secs(60)));
        assert!(first(b, t0 + Duration::from_secs(60)));
        assert!(first(a, t0 + DEDUPE + Duration::from_secs(1)));
    }
}
