//! CapacityBuffers (Karpenter's `CapacityBuffer` feature gate, off by
//! default): each buffer of the active-capacity strategy is resolved to a
//! pod template and a number of pods (`engine::buffer` decides how many),
//! and its virtual pods join every provisioning and disruption pass as
//! pending pods. They are never created. Status says how many pods the
//! buffer holds (`replicas`), whether it could be read
//! (`ReadyForProvisioning`) and where the last provisioning pass found room
//! for them (`Provisioning`, with the reason any could not be placed).

use crate::cluster::{self, Cluster};
use crate::conditions;
use crate::crds::CapacityBuffer;
use crate::crds::capacity_buffer::{ACTIVE_CAPACITY, CapacityBufferStatus, LocalObjectRef};
use crate::slim;
use crate::snapshot::pods::Pods;
use anyhow::Context;
use engine::buffer::{self, Buffer, Outcome, Size};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// Buffers are resolved again this often even without a change to them: a
/// PodTemplate or a workload's replicas may have changed.
pub const INTERVAL: Duration = Duration::from_secs(10);

const READY: &str = "ReadyForProvisioning";
const PROVISIONING: &str = "Provisioning";

#[derive(Default)]
pub struct CapacityBuffers {
    /// `None` while the gate is off.
    store: Option<Store<CapacityBuffer>>,
    changed: Arc<Notify>,
    /// The virtual pods of every buffer ready for provisioning.
    pods: RwLock<Arc<Vec<engine::Pod>>>,
    /// Per buffer ("namespace/name"): where the last provisioning pass put
    /// its pods.
    outcomes: Mutex<BTreeMap<String, Outcome>>,
}

/// Why a buffer cannot be read: Karpenter's reason and a message.
struct Unresolved {
    reason: &'static str,
    message: String,
    /// The API server did not answer: the buffer keeps the room it had
    /// until it is read again, rather than lose it to a passing error.
    retry: bool,
}

impl Unresolved {
    fn new(reason: &'static str, message: String) -> Self {
        Unresolved {
            reason,
            message,
            retry: false,
        }
    }

    fn retry(message: String) -> Self {
        Unresolved {
            reason: "ResolutionFailed",
            message,
            retry: true,
        }
    }
}

/// A buffer read: its chunk's shape and how many chunks it holds.
struct Resolved {
    template: Arc<engine::PodTemplate>,
    replicas: i32,
    /// How many it asked for, when that was more than one buffer holds.
    capped: Option<i32>,
    /// The PodTemplate it names and that template's generation.
    pod_template: Option<(String, i64)>,
}

impl CapacityBuffers {
    /// Watches CapacityBuffers when `enabled`; otherwise there are none.
    pub fn start(client: &Client, cluster: &Cluster, enabled: bool) -> Self {
        if !enabled {
            return CapacityBuffers::default();
        }
        let changed = Arc::new(Notify::new());
        let wake = changed.clone();
        let store = cluster::spawn(
            Api::<CapacityBuffer>::all(client.clone()),
            cluster.lists,
            cluster::trim,
            move |e| {
                if let kube::runtime::watcher::Event::Apply(_)
                | kube::runtime::watcher::Event::Delete(_) = e
                {
                    wake.notify_one();
                }
            },
        );
        CapacityBuffers {
            store: Some(store),
            changed,
            ..CapacityBuffers::default()
        }
    }

    /// Every ready buffer's virtual pods, to place with the pending pods.
    pub fn pods(&self) -> Arc<Vec<engine::Pod>> {
        self.pods.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Keeps where a provisioning plan put the buffers' pods, for status.
    pub fn record(&self, plan: &engine::Plan, pods: &[engine::Pod]) {
        let out = buffer::outcomes(plan, pods);
        if !out.is_empty() {
            *self.outcomes.lock().unwrap_or_else(|e| e.into_inner()) = out;
        }
    }

    /// Resolves every buffer on each change and every [`INTERVAL`], keeps
    /// their pods and writes their status; a change to the pods wakes the
    /// provisioner.
    pub async fn run(&self, client: Client, provision: tokio::sync::broadcast::Sender<()>) {
        let Some(store) = &self.store else {
            return;
        };
        if let Err(e) = store.wait_until_ready().await {
            tracing::error!(error = %e, "capacitybuffer watch never listed");
            return;
        }
        loop {
            let outcomes = self
                .outcomes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let read = resolve_all(&client, store).await;
            for (b, resolved) in &read {
                let key = key(b);
                if let Err(e) = write_status(&client, b, resolved, outcomes.get(&key)).await {
                    tracing::warn!(capacitybuffer = %key, error = format!("{e:#}"), "capacitybuffer status");
                }
            }
            if self.keep(self.gather(&read)) {
                let _ = provision.send(());
            }
            tokio::select! {
                () = tokio::time::sleep(INTERVAL) => {}
                () = self.changed.notified() => {}
            }
        }
    }

    /// Resolves every buffer once and keeps their pods, writing nothing:
    /// for `karpenter explain`, which decides as the controller would.
    pub async fn refresh(&self, client: &Client) -> anyhow::Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        store.wait_until_ready().await?;
        let read = resolve_all(client, store).await;
        self.keep(self.gather(&read));
        Ok(())
    }

    /// The pods of every buffer read; a buffer the API server did not
    /// answer for keeps the pods it had.
    fn gather(
        &self,
        read: &[(Arc<CapacityBuffer>, Result<Resolved, Unresolved>)],
    ) -> Vec<engine::Pod> {
        let held = self.pods();
        let mut pods = Vec::new();
        for (b, resolved) in read {
            match resolved {
                Ok(r) => pods.extend(virtual_pods(b, r)),
                Err(u) if u.retry => {
                    let key = key(b);
                    pods.extend(
                        held.iter()
                            .filter(|p| p.buffer.as_deref() == Some(key.as_str()))
                            .cloned(),
                    );
                }
                Err(_) => {}
            }
        }
        pods
    }

    /// Holds `pods` as the buffers' pods; whether they changed.
    fn keep(&self, pods: Vec<engine::Pod>) -> bool {
        let mut held = self.pods.write().unwrap_or_else(|e| e.into_inner());
        let changed = **held != pods;
        if changed {
            *held = Arc::new(pods);
        }
        changed
    }
}

/// Every buffer of the active-capacity strategy, by namespace and name, as
/// read now.
async fn resolve_all(
    client: &Client,
    store: &Store<CapacityBuffer>,
) -> Vec<(Arc<CapacityBuffer>, Result<Resolved, Unresolved>)> {
    let mut buffers = store.state();
    buffers.retain(|b| {
        b.spec
            .provisioning_strategy
            .as_deref()
            .unwrap_or(ACTIVE_CAPACITY)
            == ACTIVE_CAPACITY
    });
    buffers.sort_by_key(|b| (b.namespace(), b.name_any()));
    let mut out = Vec::with_capacity(buffers.len());
    for b in buffers {
        let resolved = resolve(client, &b).await;
        out.push((b, resolved));
    }
    out
}

/// "namespace/name", as the buffer's virtual pods name it.
fn key(b: &CapacityBuffer) -> String {
    format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any())
}

fn virtual_pods(b: &CapacityBuffer, r: &Resolved) -> Vec<engine::Pod> {
    let creation = b
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let namespace = b.namespace().unwrap_or_default();
    let uid = b.uid().unwrap_or_default();
    let who = Buffer {
        namespace: &namespace,
        name: &b.name_any(),
        uid: &uid,
        creation,
    };
    buffer::virtual_pods(who, r.replicas, r.template.clone())
}

/// The buffer's chunk and count, or why it cannot be read: Karpenter's
/// reason and message.
async fn resolve(client: &Client, b: &CapacityBuffer) -> Result<Resolved, Unresolved> {
    let namespace = b.namespace().unwrap_or_default();
    let spec = &b.spec;
    let (template, scalable_replicas, pod_template) =
        match (&spec.pod_template_ref, &spec.scalable_ref) {
            (Some(r), _) => {
                let api: Api<PodTemplate> = Api::namespaced(client.clone(), &namespace);
                match api.get_opt(&r.name).await {
                    Ok(Some(pt)) => {
                        let generation = pt.metadata.generation.unwrap_or(0);
                        let t = pt.template.unwrap_or_default();
                        (t, None, Some((r.name.clone(), generation)))
                    }
                    Ok(None) => {
                        return Err(Unresolved::new(
                            "PodTemplateNotFound",
                            format!("podtemplates {:?} not found", r.name),
                        ));
                    }
                    Err(e) => return Err(Unresolved::retry(e.to_string())),
                }
            }
            (None, Some(r)) => {
                if !(r.api_group.is_empty() || r.api_group == "apps") {
                    return Err(Unresolved::new(
                        "ResolutionFailed",
                        format!("unsupported scalableRef API group {:?}", r.api_group),
                    ));
                }
                let found = match r.kind.as_str() {
                    "Deployment" => {
                        workload::<Deployment>(client, &namespace, &r.name, |d| {
                            let s = d.spec;
                            (s.template, s.replicas)
                        })
                        .await
                    }
                    "StatefulSet" => {
                        workload::<StatefulSet>(client, &namespace, &r.name, |d| {
                            let s = d.spec;
                            (s.template, s.replicas)
                        })
                        .await
                    }
                    "ReplicaSet" => {
                        workload::<ReplicaSet>(client, &namespace, &r.name, |d| {
                            let s = d.spec;
                            (s.template.unwrap_or_default(), s.replicas)
                        })
                        .await
                    }
                    other => {
                        return Err(Unresolved::new(
                            "ResolutionFailed",
                            format!("unsupported kind {other:?}"),
                        ));
                    }
                };
                match found {
                    Ok(Some((t, replicas))) => (t, Some(replicas.unwrap_or(1)), None),
                    Ok(None) => {
                        return Err(Unresolved::new(
                            "ScalableRefNotFound",
                            format!("{} {:?} not found", r.kind, r.name),
                        ));
                    }
                    Err(e) => return Err(Unresolved::retry(format!("{e:#}"))),
                }
            }
            (None, None) => {
                return Err(Unresolved::new(
                    "ResolutionFailed",
                    "Neither podTemplateRef nor scalableRef is set".into(),
                ));
            }
        };
    let template = engine_template(&namespace, &b.name_any(), template)
        .map_err(|e| Unresolved::new("ResolutionFailed", format!("{e:#}")))?;
    let mut limits = engine::ResourceList::new();
    for (name, q) in spec.limits.iter().flatten() {
        let amount = engine::parse_resource(name, &q.0)
            .map_err(|e| Unresolved::new("ResolutionFailed", format!("limits {name}: {e}")))?;
        limits.insert(name.clone(), amount);
    }
    let size = Size {
        replicas: spec.replicas,
        percentage: spec.percentage,
        limits,
    };
    let asked = buffer::replicas(&size, &template.requests, scalable_replicas);
    let replicas = asked.min(buffer::MAX_REPLICAS);
    Ok(Resolved {
        replicas,
        capped: (asked > replicas).then_some(asked),
        template,
        pod_template,
    })
}

async fn workload<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    read: impl FnOnce(K) -> (PodTemplateSpec, Option<i32>),
) -> anyhow::Result<Option<(PodTemplateSpec, Option<i32>)>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(read))
}

/// The template as the engine reads a pod of it: requests counted as
/// Kubernetes counts a pod's (init containers, sidecars, pod-level
/// resources), through the same conversion pending pods take.
fn engine_template(
    namespace: &str,
    buffer: &str,
    t: PodTemplateSpec,
) -> anyhow::Result<Arc<engine::PodTemplate>> {
    let metadata = t.metadata.unwrap_or_default();
    let pod: slim::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("capacity-buffer-{buffer}"),
            "namespace": namespace,
            "labels": metadata.labels,
        },
        "spec": t.spec,
    }))
    .context("reading the pod template")?;
    Ok(Pods::default().pod(&pod, 0)?.template)
}

impl Resolved {
    fn ready_message(&self) -> String {
        match self.capped {
            Some(asked) => format!(
                "Pod template resolved successfully; {asked} replicas asked, {} kept (the most one buffer holds)",
                self.replicas
            ),
            None => "Pod template resolved successfully".to_string(),
        }
    }
}

async fn write_status(
    client: &Client,
    b: &CapacityBuffer,
    resolved: &Result<Resolved, Unresolved>,
    outcome: Option<&Outcome>,
) -> anyhow::Result<()> {
    let before = b.status.clone().unwrap_or_default();
    let mut status = CapacityBufferStatus {
        provisioning_strategy: b.spec.provisioning_strategy.clone(),
        ..before.clone()
    };
    let generation = b.metadata.generation;
    let mut set = |type_: &str, state: &str, reason: &str, message: &str| {
        conditions::set(
            &mut status.conditions,
            type_,
            state,
            reason,
            message,
            generation,
        )
    };
    match resolved {
        Ok(r) => {
            set(READY, "True", "Resolved", &r.ready_message());
            if let Some((state, reason, message)) = provisioning(r.replicas, outcome) {
                set(PROVISIONING, state, reason, &message);
            }
            status.replicas = Some(r.replicas);
            status.pod_template_ref = r
                .pod_template
                .as_ref()
                .map(|(name, _)| LocalObjectRef { name: name.clone() });
            status.pod_template_generation = r.pod_template.as_ref().map(|(_, g)| *g);
        }
        Err(u) => {
            set(READY, "False", u.reason, &u.message);
            set(
                PROVISIONING,
                "False",
                "NotReadyForProvisioning",
                "Buffer is not ReadyForProvisioning",
            );
        }
    }
    if conditions::same(&before.conditions, &status.conditions)
        && before.replicas == status.replicas
        && before.pod_template_ref == status.pod_template_ref
        && before.pod_template_generation == status.pod_template_generation
        && before.provisioning_strategy == status.provisioning_strategy
    {
        return Ok(());
    }
    Api::<CapacityBuffer>::namespaced(client.clone(), &b.namespace().unwrap_or_default())
        .patch_status(
            &b.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": status})),
        )
        .await?;
    Ok(())
}

/// The `Provisioning` condition for a buffer of `replicas` pods, from where
/// the last pass put them; `None` leaves it as it is (no pass has placed
/// them yet).
fn provisioning(
    replicas: i32,
    outcome: Option<&Outcome>,
) -> Option<(&'static str, &'static str, String)> {
    if replicas == 0 {
        return Some((
            "False",
            "BufferEmpty",
            "Buffer has zero desired replicas".into(),
        ));
    }
    let o = outcome?;
    if o.new > 0 || o.failed > 0 {
        let mut message = format!(
            "{}/{replicas} virtual pods required new capacity, {} failed",
            o.new, o.failed
        );
        if let Some(why) = &o.reason {
            message.push_str(&format!(": {why}"));
        }
        return Some(("False", "RequiresNewCapacity", message));
    }
    (o.existing == replicas as u32).then(|| {
        (
            "True",
            "FitsExistingCapacity",
            format!("All {replicas} virtual pods fit on existing capacity"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provisioning_says_where_the_pods_went_and_why_some_did_not() {
        assert_eq!(provisioning(3, None), None);
        assert_eq!(provisioning(0, None).expect("empty").1, "BufferEmpty");
        let fits = Outcome {
            existing: 3,
            ..Outcome::default()
        };
        assert_eq!(
            provisioning(3, Some(&fits)).expect("fits").1,
            "FitsExistingCapacity"
        );
        let short = Outcome {
            existing: 1,
            new: 1,
            failed: 1,
            reason: Some("no instance type has enough cpu".into()),
        };
        let (state, reason, message) = provisioning(3, Some(&short)).expect("short");
        assert_eq!((state, reason), ("False", "RequiresNewCapacity"));
        assert_eq!(
            message,
            "1/3 virtual pods required new capacity, 1 failed: no instance type has enough cpu"
        );
    }

    #[test]
    fn a_buffer_the_api_server_did_not_answer_for_keeps_its_room() {
        let buffer = |name: &str| {
            let mut b = CapacityBuffer::new(name, Default::default());
            b.metadata.namespace = Some("ns".into());
            Arc::new(b)
        };
        let buffers = CapacityBuffers::default();
        let spare = Buffer {
            namespace: "ns",
            name: "spare",
            uid: "u",
            creation: 0,
        };
        buffers.keep(buffer::virtual_pods(spare, 2, Arc::default()));
        let read = vec![
            (buffer("spare"), Err(Unresolved::retry("timed out".into()))),
            (
                buffer("gone"),
                Err(Unresolved::new("PodTemplateNotFound", "not found".into())),
            ),
        ];
        let pods = buffers.gather(&read);
        assert_eq!(pods.len(), 2);
        assert!(pods.iter().all(|p| p.buffer.as_deref() == Some("ns/spare")));
        // Read and missing: the room goes.
        let read = vec![(
            buffer("spare"),
            Err(Unresolved::new("PodTemplateNotFound", "not found".into())),
        )];
        assert!(buffers.gather(&read).is_empty());
    }

    #[test]
    fn a_buffer_asking_for_more_than_one_holds_says_what_it_kept() {
        let r = Resolved {
            template: Arc::default(),
            replicas: buffer::MAX_REPLICAS,
            capped: Some(2_000_000),
            pod_template: None,
        };
        assert_eq!(
            r.ready_message(),
            "Pod template resolved successfully; 2000000 replicas asked, 10000 kept (the most one buffer holds)"
        );
    }

    #[test]
    fn a_template_is_read_as_a_pod_of_it() {
        let t: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [
                {"name": "a", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "image": "x", "resources": {"requests": {"cpu": "250m"}}}
            ]}
        }))
        .expect("a pod template");
        let e = engine_template("ns", "spare", t).expect("read");
        assert_eq!(e.requests["cpu"], 750);
        assert_eq!(e.requests["memory"], 1 << 30);
        assert_eq!(e.labels["app"], "web");
    }
}
