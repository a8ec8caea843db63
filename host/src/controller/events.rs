//! Kubernetes Events on NodeClaims, Nodes and pods, in Karpenter's words.
//! Repeats of the same decision are dropped so a pending pod does not get
//! one event per batch, nor a kept node one per disruption pass.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::collections::HashMap;
use std::sync::Mutex;

pub struct Events {
    recorder: Recorder,
    /// Object uid to the last decision published for it.
    decisions: Mutex<HashMap<String, String>>,
}

const MAX_REMEMBERED: usize = 100_000;

impl Events {
    pub fn new(client: Client, instance: &str) -> Self {
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "karpenter".into(),
                    instance: Some(instance.to_string()),
                },
            ),
            decisions: Mutex::default(),
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
        self.publish_as(obj, type_, reason, reason.to_string(), note)
            .await;
    }

    /// The recorder folds events with the same object, reason and action into
    /// one series, keeping the first note; `action` tells them apart.
    async fn publish_as<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        action: String,
        note: String,
    ) {
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action,
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(reason, error = %e, "event not published");
        }
    }

    /// Publishes a decision about an object (a pod's nomination, a node kept
    /// from disruption) unless it is the one published last for it.
    pub async fn decision<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let uid = obj.meta().uid.clone().unwrap_or_default();
        let key = format!("{reason}\0{note}");
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
        // One series per distinct note: a node blocked first for one reason
        // and then another gets an event for each.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&note, &mut h);
        let action = format!("{reason}-{:08x}", std::hash::Hasher::finish(&h) as u32);
        self.publish_as(obj, type_, reason, action, note).await;
    }
}
