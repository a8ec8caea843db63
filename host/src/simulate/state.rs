//! The cluster a simulation starts from (empty, or read live), and the
//! manifests applied or deleted on top of it as `kubectl apply` and
//! `kubectl delete` would leave it once the workload controllers caught up.

use super::manifests::{Manifests, Workload};
use anyhow::Context;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod as FullPod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_controller::crds::{NodeClaim, NodeOverlay, NodePool};
use karpenter_controller::slim::pod::{PodCondition, PodStatus, State as PodState};
use karpenter_controller::slim::{Node, Pod};
use karpenter_controller::snapshot::pods::Pods;
use serde_json::Value;
use std::sync::Arc;
use vocabulary::labels;

/// Labels the workload controllers add to each pod: not part of the template.
const GENERATED_LABELS: [&str; 4] = [
    "pod-template-hash",
    "controller-revision-hash",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
];

/// Labels the API server copies from the node onto a pod when it binds it
/// (PodTopologyLabels), unless the template sets them itself.
const TOPOLOGY_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// Tolerations the API server adds to every pod (DefaultTolerationSeconds).
const DEFAULT_TOLERATIONS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

#[derive(Default, Clone)]
pub struct State {
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub node_claims: Vec<Arc<NodeClaim>>,
    pub node_pools: Vec<Arc<NodePool>>,
    pub node_overlays: Vec<Arc<NodeOverlay>>,
    /// NodeClasses of any kind, as JSON with apiVersion and kind.
    pub node_classes: Vec<Value>,
    pub daemon_sets: Vec<Arc<DaemonSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
}

impl State {
    /// Adds or replaces every object of `m`. Returns what changed, one line
    /// per object, for the output.
    pub fn apply(&mut self, m: &Manifests, now: Time) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        for np in &m.node_pools {
            let name = np.metadata.name.clone().unwrap_or_default();
            let replaced = replace(&mut self.node_pools, Arc::new(np.clone()), |o| {
                o.metadata.name.as_deref() == Some(&name)
            });
            notes.push(format!("nodepool {name} {}", verb(replaced)));
        }
        for o in &m.node_overlays {
            let name = o.metadata.name.clone().unwrap_or_default();
            let replaced = replace(&mut self.node_overlays, Arc::new(o.clone()), |x| {
                x.metadata.name.as_deref() == Some(&name)
            });
            notes.push(format!("nodeoverlay {name} {}", verb(replaced)));
        }
        for class in &m.node_classes {
            let key = class_key(class);
            let replaced = replace(&mut self.node_classes, class.clone(), |o| {
                class_key(o) == key
            });
            notes.push(format!("{} {} {}", key.1, key.2, verb(replaced)));
        }
        for n in &m.nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let replaced = replace(&mut self.nodes, Arc::new(n.clone()), |o| {
                o.metadata.name.as_deref() == Some(&name)
            });
            notes.push(format!("node {name} {}", verb(replaced)));
        }
        for ds in &m.daemon_sets {
            let key = ns_name(&ds.metadata);
            let replaced = replace(&mut self.daemon_sets, Arc::new(ds.clone()), |o| {
                ns_name(&o.metadata) == key
            });
            notes.push(format!("daemonset {}/{} {}", key.0, key.1, verb(replaced)));
        }
        for pdb in &m.pdbs {
            let key = ns_name(&pdb.metadata);
            let replaced = replace(&mut self.pdbs, Arc::new(pdb.clone()), |o| {
                ns_name(&o.metadata) == key
            });
            notes.push(format!(
                "poddisruptionbudget {}/{} {}",
                key.0,
                key.1,
                verb(replaced)
            ));
        }
        for p in &m.pods {
            let key = ns_name(&p.metadata);
            if self.pods.iter().any(|o| ns_name(&o.metadata) == key) {
                // A pod's scheduling fields cannot change: apply leaves it.
                notes.push(format!("pod {}/{} unchanged", key.0, key.1));
                continue;
            }
            self.pods.push(Arc::new(new_pod(p.clone(), &now)));
            notes.push(format!("pod {}/{} created", key.0, key.1));
        }
        for w in &m.workloads {
            notes.push(self.apply_workload(w, &now)?);
        }
        Ok(notes)
    }

    /// Removes every object named in `m`, with what Kubernetes removes with
    /// it: a NodePool's nodes, a workload's pods; the pods of a removed node
    /// are recreated pending when a controller owns them.
    pub fn delete(&mut self, m: &Manifests, now: Time) -> Vec<String> {
        let mut notes = Vec::new();
        for np in &m.node_pools {
            let name = np.metadata.name.clone().unwrap_or_default();
            self.node_pools
                .retain(|o| o.metadata.name.as_deref() != Some(&name));
            self.node_claims
                .retain(|c| c.node_pool() != Some(name.as_str()));
            let gone: Vec<String> = self
                .nodes
                .iter()
                .filter(|n| n.label(labels::NODE_POOL) == Some(name.as_str()))
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            self.remove_nodes(&gone, &now);
            notes.push(format!(
                "nodepool {name} deleted with its {} node(s)",
                gone.len()
            ));
        }
        for o in &m.node_overlays {
            let name = o.metadata.name.clone().unwrap_or_default();
            self.node_overlays
                .retain(|x| x.metadata.name.as_deref() != Some(&name));
            notes.push(format!("nodeoverlay {name} deleted"));
        }
        for class in &m.node_classes {
            let key = class_key(class);
            self.node_classes.retain(|o| class_key(o) != key);
            notes.push(format!("{} {} deleted", key.1, key.2));
        }
        let nodes: Vec<String> = m
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        self.remove_nodes(&nodes, &now);
        notes.extend(nodes.iter().map(|n| format!("node {n} deleted")));
        for ds in &m.daemon_sets {
            let key = ns_name(&ds.metadata);
            self.daemon_sets.retain(|o| ns_name(&o.metadata) != key);
            notes.push(format!("daemonset {}/{} deleted", key.0, key.1));
        }
        for pdb in &m.pdbs {
            let key = ns_name(&pdb.metadata);
            self.pdbs.retain(|o| ns_name(&o.metadata) != key);
            notes.push(format!("poddisruptionbudget {}/{} deleted", key.0, key.1));
        }
        for p in &m.pods {
            let key = ns_name(&p.metadata);
            self.pods.retain(|o| ns_name(&o.metadata) != key);
            notes.push(format!("pod {}/{} deleted", key.0, key.1));
        }
        for w in &m.workloads {
            let before = self.pods.len();
            self.pods.retain(|p| !owned_by(p, w));
            notes.push(format!(
                "{} {}/{} deleted with its {} pod(s)",
                w.kind.to_lowercase(),
                w.namespace,
                w.name,
                before - self.pods.len()
            ));
        }
        notes
    }

    /// Nodes and their NodeClaims go; their pods are recreated pending when
    /// a ReplicaSet, StatefulSet or Job owns them, and are gone otherwise.
    fn remove_nodes(&mut self, names: &[String], now: &Time) {
        let provider_ids: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.metadata.name.as_ref().is_some_and(|x| names.contains(x)))
            .filter_map(|n| n.provider_id().map(str::to_string))
            .collect();
        self.nodes
            .retain(|n| !n.metadata.name.as_ref().is_some_and(|x| names.contains(x)));
        self.node_claims.retain(|c| {
            !c.provider_id()
                .is_some_and(|id| provider_ids.iter().any(|x| x == id))
        });
        let mut kept = Vec::with_capacity(self.pods.len());
        for p in std::mem::take(&mut self.pods) {
            let on = p.spec.as_ref().and_then(|s| s.node_name.as_ref());
            if !on.is_some_and(|n| names.contains(n)) {
                kept.push(p);
                continue;
            }
            let recreated = p.owner_references().iter().any(|o| {
                o.controller == Some(true)
                    && matches!(o.kind.as_str(), "ReplicaSet" | "StatefulSet" | "Job")
            });
            if recreated {
                let mut p = Pod::clone(&p);
                if let Some(spec) = &mut p.spec {
                    spec.node_name = None;
                }
                p.status = Some(pending_status());
                p.metadata.creation_timestamp = Some(now.clone());
                kept.push(Arc::new(p));
            }
        }
        self.pods = kept;
    }

    /// A workload applied: when its template is the same for the scheduler
    /// as its running pods', a scale (the pods stay; new ones pend; the
    /// surplus goes, pending and newest first, as a ReplicaSet scales down);
    /// otherwise a rollout, every pod replaced by a pending one.
    fn apply_workload(&mut self, w: &Workload, now: &Time) -> anyhow::Result<String> {
        let what = format!("{} {}/{}", w.kind.to_lowercase(), w.namespace, w.name);
        let template = template_pod(w, 0, now);
        let mut converter = Pods::default();
        let own = template.labels().clone();
        let wanted =
            scheduling_view(&mut converter, &template, &own).with_context(|| what.clone())?;
        let mut owned: Vec<Arc<Pod>> = Vec::new();
        self.pods.retain(|p| {
            if owned_by(p, w) {
                owned.push(p.clone());
                false
            } else {
                true
            }
        });
        let before = owned.len();
        let same = owned
            .iter()
            .all(|p| scheduling_view(&mut converter, p, &own).is_ok_and(|v| v == wanted));
        if !same {
            owned.clear();
        }
        // Pending ones first, then the newest: these go first.
        owned.sort_by_key(|p| {
            let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
            let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            (bound, created.map(std::cmp::Reverse))
        });
        let keep = (w.replicas as usize).min(owned.len());
        let kept = owned.split_off(owned.len() - keep);
        let added = w.replicas as usize - kept.len();
        self.pods.extend(kept);
        let taken: std::collections::BTreeSet<String> = self
            .pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(&w.namespace))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let free = (0..).filter(|i| !taken.contains(&format!("{}-sim-{i}", w.name)));
        for i in free.take(added) {
            self.pods.push(Arc::new(template_pod(w, i, now)));
        }
        Ok(match (same, before) {
            (_, 0) => format!("{what} created with {} pod(s)", w.replicas),
            (true, n) if n == w.replicas as usize => format!("{what} unchanged ({n} pods)"),
            (true, n) => format!("{what} scaled from {n} to {} pods", w.replicas),
            (false, n) => format!(
                "{what}: its pod template changes what the scheduler sees, so its {n} pod(s) are replaced by {}",
                w.replicas
            ),
        })
    }
}

fn verb(replaced: bool) -> &'static str {
    if replaced { "replaced" } else { "added" }
}

fn replace<T>(list: &mut Vec<T>, new: T, same: impl Fn(&T) -> bool) -> bool {
    match list.iter().position(same) {
        Some(i) => {
            list[i] = new;
            true
        }
        None => {
            list.push(new);
            false
        }
    }
}

fn ns_name(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.name.clone().unwrap_or_default(),
    )
}

/// API group, kind, name.
fn class_key(o: &Value) -> (String, String, String) {
    let group = o["apiVersion"]
        .as_str()
        .and_then(|v| v.split('/').next())
        .unwrap_or_default();
    (
        group.to_string(),
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Whether the workload's controller made this pod. A Deployment's pods
/// belong to its ReplicaSet `<name>-<pod-template-hash>`.
fn owned_by(p: &Pod, w: &Workload) -> bool {
    if p.metadata.namespace.as_deref().unwrap_or("default") != w.namespace {
        return false;
    }
    // The workload itself owns the pods a simulation made (`template_pod`).
    p.owner_references().iter().any(|o| {
        let direct = o.kind == w.kind && o.name == w.name;
        let replica_set = w.kind == "Deployment"
            && o.kind == "ReplicaSet"
            && p.labels()
                .get("pod-template-hash")
                .is_some_and(|h| o.name == format!("{}-{h}", w.name));
        o.controller == Some(true) && (direct || replica_set)
    })
}

/// What the scheduler reads of a pod, without what the API server and the
/// workload controllers add to every pod (`own`: the template's labels).
fn scheduling_view(
    converter: &mut Pods,
    p: &Pod,
    own: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<engine::PodTemplate> {
    let mut t = engine::PodTemplate::clone(&converter.pod(p, 0)?.template);
    t.labels.retain(|k, _| {
        !GENERATED_LABELS.contains(&k) && (own.contains_key(k) || !TOPOLOGY_LABELS.contains(&k))
    });
    t.tolerations
        .retain(|x| !DEFAULT_TOLERATIONS.contains(&x.key.as_str()));
    Ok(t)
}

/// One of the workload's pods as its controller would create it, pending.
fn template_pod(w: &Workload, i: usize, now: &Time) -> Pod {
    let mut metadata = w.template.metadata.clone().unwrap_or_default();
    metadata.name = Some(format!("{}-sim-{i}", w.name));
    metadata.namespace = Some(w.namespace.clone());
    metadata.uid = Some(format!("simulated/{}/{}-sim-{i}", w.namespace, w.name));
    metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: w.kind.into(),
            name: w.name.clone(),
            uid: format!("simulated/{}", w.name),
            controller: Some(true),
            ..Default::default()
        },
    ]);
    new_pod(
        FullPod {
            metadata,
            spec: w.template.spec.clone(),
            status: None,
        },
        now,
    )
}

/// A pod from a manifest: pending (kube-scheduler found no node yet, which
/// is what makes a pod the provisioner's) unless it names its node.
fn new_pod(mut p: FullPod, now: &Time) -> Pod {
    let (namespace, name) = ns_name(&p.metadata);
    p.metadata.namespace = Some(namespace.clone());
    if p.metadata.uid.is_none() {
        p.metadata.uid = Some(format!("simulated/{namespace}/{name}"));
    }
    p.metadata.creation_timestamp = Some(now.clone());
    let bound = p.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let mut pod = Pod::from(p);
    pod.status = Some(if bound {
        PodStatus {
            state: PodState {
                phase: Some("Running".into()),
                conditions: None,
            }
            .into(),
            ..PodStatus::default()
        }
    } else {
        pending_status()
    });
    pod
}

fn pending_status() -> PodStatus {
    PodStatus {
        state: PodState {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
            }]),
        }
        .into(),
        ..PodStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFLATE: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: default}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      containers: [{name: c, image: pause, resources: {requests: {cpu: CPU}}}]
"#;

    fn inflate(replicas: i32, cpu: &str) -> Manifests {
        let mut m = Manifests::default();
        let text = INFLATE
            .replace("REPLICAS", &replicas.to_string())
            .replace("CPU", cpu);
        m.add_yaml("inflate.yaml", &text).expect("parses");
        m
    }

    /// A running pod of the Deployment as the cluster holds it: owned by
    /// its ReplicaSet, with the labels and tolerations the API server and
    /// the controllers add.
    fn running(i: usize, hour: i64) -> Arc<Pod> {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("inflate-7d9f-{i}"), "namespace": "default", "uid": format!("u{i}"),
                "creationTimestamp": format!("2026-01-01T{hour:02}:00:00Z"),
                "labels": {"app": "inflate", "pod-template-hash": "7d9f",
                           "topology.kubernetes.io/zone": "zone-a"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "inflate-7d9f", "uid": "rs", "controller": true}]
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                ]
            },
            "status": {"phase": "Running"}
        }))
        .expect("pod");
        Arc::new(p)
    }

    fn cluster() -> State {
        State {
            pods: (0..5).map(|i| running(i, i as i64)).collect(),
            ..State::default()
        }
    }

    fn now() -> Time {
        Time(jiff::Timestamp::UNIX_EPOCH)
    }

    fn pending(s: &State) -> usize {
        s.pods
            .iter()
            .filter(|p| karpenter_controller::snapshot::cluster::is_provisionable(p))
            .count()
    }

    #[test]
    fn scaling_up_keeps_the_running_pods_and_adds_pending_ones() {
        let mut s = cluster();
        let notes = s.apply(&inflate(50, "1"), now()).expect("applies");
        assert_eq!(
            notes,
            ["deployment default/inflate scaled from 5 to 50 pods"]
        );
        assert_eq!(s.pods.len(), 50);
        assert_eq!(pending(&s), 45);
    }

    #[test]
    fn pods_a_simulation_made_belong_to_their_workload() {
        let mut s = cluster();
        s.apply(&inflate(50, "1"), now()).expect("applies");
        let notes = s.apply(&inflate(10, "1"), now()).expect("applies");
        assert_eq!(
            notes,
            ["deployment default/inflate scaled from 50 to 10 pods"]
        );
        assert_eq!(s.pods.len(), 10);
        assert_eq!(pending(&s), 5, "the pending ones went first");
    }

    #[test]
    fn scaling_down_removes_the_newest_pods_first() {
        let mut s = cluster();
        s.apply(&inflate(1, "1"), now()).expect("applies");
        let names: Vec<_> = s
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["inflate-7d9f-0"]);
    }

    #[test]
    fn a_template_the_scheduler_sees_differently_replaces_every_pod() {
        let mut s = cluster();
        let notes = s.apply(&inflate(5, "2"), now()).expect("applies");
        assert!(notes[0].contains("replaced by 5"), "{notes:?}");
        assert_eq!(pending(&s), 5);
        assert!(s.pods.iter().all(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.contains("-sim-"))
        }));
    }

    #[test]
    fn deleting_a_node_recreates_its_replicaset_pods_pending() {
        let mut s = cluster();
        let mut m = Manifests::default();
        m.add_yaml(
            "node.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n",
        )
        .expect("parses");
        s.delete(&m, now());
        assert_eq!(s.pods.len(), 5);
        assert_eq!(pending(&s), 5);
        let mut m = Manifests::default();
        m.add_yaml(
            "inflate.yaml",
            &INFLATE.replace("REPLICAS", "5").replace("CPU", "1"),
        )
        .expect("parses");
        let notes = s.delete(&m, now());
        assert_eq!(
            notes,
            ["deployment default/inflate deleted with its 5 pod(s)"]
        );
        assert!(s.pods.is_empty());
    }
}
