//! Kubernetes Events on NodeClaims, Nodes and pods, in Karpenter's words.
//! Repeats of the same pod decision are dropped so a pending pod does not
//! get one event per batch.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use std::collections::HashMap;
use std::sync::Mutex;

pub struct Events {
    recorder: Recorder,
    /// Pod uid to the last decision published for it.
    pod_decisions: Mutex<HashMap<String, String>>,
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
            pod_decisions: Mutex::default(),
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
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::debug!(reason, error = %e, "event not published");
        }
    }

    /// Publishes a pod decision unless it is the one published last for it.
    pub async fn pod_decision(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = format!("{reason}\0{note}");
        {
            let mut seen = self.pod_decisions.lock().unwrap_or_else(|e| e.into_inner());
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
        self.publish(pod, type_, reason, note).await;
    }
}
