//! The pod as the controller stores it: what scheduling, disruption,
//! termination and the startup metric read, and nothing else.
//!
//! A `k8s_openapi` Pod is wide (every Container field, set or not), and at
//! tens of thousands of pods full Pods were most of the controller's memory
//! (`host/tests/store_memory.rs` counts what a stored pod costs now). The
//! fields here keep the API's names and types, so code reads them as it
//! would a full Pod, and unknown fields are skipped while parsing.

use super::shared::{Shared, poolable};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Deref;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(from = "WirePod", into = "WirePod")]
pub struct Pod {
    /// Who the pod is and when: its labels, annotations and owner
    /// references are in `lineage`, and read through [`Pod::labels`],
    /// [`Pod::annotations`] and [`Pod::owner_references`].
    pub metadata: ObjectMeta,
    pub lineage: Shared<Lineage>,
    pub spec: Option<PodSpec>,
    pub status: Option<PodStatus>,
}

/// What the pods of one owner share: a ReplicaSet's pods carry the same
/// labels (its pod-template-hash included), annotations and owner
/// reference; stored once per owner rather than once per pod, since they
/// were the larger part of the pods' heap.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Lineage {
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub owner_references: Option<Vec<OwnerReference>>,
}

poolable!(Lineage);

/// These shadow `ResourceExt`'s, which would read the (emptied) metadata.
impl Pod {
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.lineage.labels.as_ref().unwrap_or(&EMPTY)
    }
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.lineage.annotations.as_ref().unwrap_or(&EMPTY)
    }
    pub fn owner_references(&self) -> &[OwnerReference] {
        self.lineage.owner_references.as_deref().unwrap_or_default()
    }
}

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// The pod as the API server writes it.
#[derive(Clone, Deserialize, Serialize)]
struct WirePod {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

impl From<WirePod> for Pod {
    fn from(p: WirePod) -> Self {
        let mut metadata = p.metadata;
        let lineage = Lineage {
            labels: metadata.labels.take(),
            annotations: super::stored_annotations(metadata.annotations.take()),
            owner_references: metadata.owner_references.take(),
        };
        Pod {
            metadata,
            lineage: lineage.into(),
            spec: p.spec,
            status: p.status,
        }
    }
}

impl From<Pod> for WirePod {
    fn from(p: Pod) -> Self {
        let mut metadata = p.metadata;
        metadata.labels = p.lineage.labels.clone();
        metadata.annotations = p.lineage.annotations.clone();
        metadata.owner_references = p.lineage.owner_references.clone();
        WirePod {
            metadata,
            spec: p.spec,
            status: p.status,
        }
    }
}

/// The spec: the node it is bound to, and the rest, which the pods of one
/// template share (see [`Shared`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    pub node_name: Option<String>,
    #[serde(flatten)]
    pub template: Shared<Template>,
}

impl Deref for PodSpec {
    type Target = Template;
    fn deref(&self) -> &Template {
        &self.template
    }
}

/// What a pod's template decides: the same for every pod made from it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    #[serde(default)]
    pub containers: Vec<Container>,
    pub init_containers: Option<Vec<Container>>,
    pub node_selector: Option<BTreeMap<String, String>>,
    pub affinity: Option<core::Affinity>,
    pub tolerations: Option<Vec<core::Toleration>>,
    pub topology_spread_constraints: Option<Vec<core::TopologySpreadConstraint>>,
    pub priority: Option<i32>,
    pub priority_class_name: Option<String>,
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level resources (Kubernetes 1.34+).
    pub resources: Option<core::ResourceRequirements>,
    pub termination_grace_period_seconds: Option<i64>,
}

poolable!(Template);

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    pub resources: Option<core::ResourceRequirements>,
    pub ports: Option<Vec<core::ContainerPort>>,
    pub restart_policy: Option<String>,
}

/// The status: when it started and where it is nominated, per pod; its
/// phase and conditions, which most pods share.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    pub nominated_node_name: Option<String>,
    pub start_time: Option<Time>,
    #[serde(flatten)]
    pub state: Shared<State>,
}

impl Deref for PodStatus {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct State {
    pub phase: Option<String>,
    pub conditions: Option<Vec<PodCondition>>,
}

poolable!(State);

/// A condition's type, status and reason: all that is read of them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub reason: Option<String>,
}

super::core_v1_resource!(Pod, NamespaceResourceScope, "pods");

impl From<core::Container> for Container {
    fn from(c: core::Container) -> Self {
        Container {
            name: c.name,
            resources: c.resources,
            ports: c.ports,
            restart_policy: c.restart_policy,
        }
    }
}

impl From<core::PodSpec> for PodSpec {
    fn from(s: core::PodSpec) -> Self {
        PodSpec {
            node_name: s.node_name,
            template: Template {
                containers: s.containers.into_iter().map(Container::from).collect(),
                init_containers: s
                    .init_containers
                    .map(|cs| cs.into_iter().map(Container::from).collect()),
                node_selector: s.node_selector,
                affinity: s.affinity,
                tolerations: s.tolerations,
                topology_spread_constraints: s.topology_spread_constraints,
                priority: s.priority,
                priority_class_name: s.priority_class_name,
                overhead: s.overhead,
                resources: s.resources,
                termination_grace_period_seconds: s.termination_grace_period_seconds,
            }
            .into(),
        }
    }
}

impl From<core::PodStatus> for PodStatus {
    fn from(s: core::PodStatus) -> Self {
        PodStatus {
            nominated_node_name: s.nominated_node_name,
            start_time: s.start_time,
            state: State {
                phase: s.phase,
                conditions: s.conditions.map(|cs| {
                    cs.into_iter()
                        .map(|c| PodCondition {
                            type_: c.type_,
                            status: c.status,
                            reason: c.reason,
                        })
                        .collect()
                }),
            }
            .into(),
        }
    }
}

impl From<core::Pod> for Pod {
    fn from(p: core::Pod) -> Self {
        WirePod {
            metadata: p.metadata,
            spec: p.spec.map(PodSpec::from),
            status: p.status.map(PodStatus::from),
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server's JSON parses into the same fields a full Pod has.
    #[test]
    fn parses_what_a_full_pod_parses() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                         "labels": {"app": "web"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r1", "controller": true}]},
            "spec": {
                "nodeSelector": {"disk": "ssd"},
                "priorityClassName": "system-node-critical", "priority": 2000001000,
                "terminationGracePeriodSeconds": 30,
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}],
                                "resources": {"requests": {"cpu": "250m"}},
                                "ports": [{"containerPort": 80, "hostPort": 8080}]}],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            },
            "status": {"phase": "Pending", "nominatedNodeName": "n1",
                       "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
                       "containerStatuses": []}
        });
        let full: core::Pod = serde_json::from_value(json.clone()).expect("full pod");
        let mut sibling = json.clone();
        sibling["metadata"]["name"] = "web-2".into();
        sibling["metadata"]["uid"] = "u2".into();
        let slim: Pod = serde_json::from_value(json).expect("slim pod");
        assert_eq!(slim, Pod::from(full));
        assert_eq!(slim.labels().get("app").map(String::as_str), Some("web"));
        assert_eq!(slim.owner_references()[0].kind, "ReplicaSet");
        let sibling: Pod = serde_json::from_value(sibling).expect("sibling pod");
        assert!(
            std::ptr::eq(&*slim.lineage, &*sibling.lineage),
            "the pods of one owner share their labels and owner reference"
        );
        let again: Pod = serde_json::from_value(serde_json::to_value(&slim).expect("serializes"))
            .expect("parses again");
        assert_eq!(again, slim);
        let spec = slim.spec.as_ref().expect("spec");
        assert_eq!(
            spec.containers[0].ports.as_ref().expect("ports")[0].host_port,
            Some(8080)
        );
        assert_eq!(
            spec.init_containers.as_ref().expect("init")[0]
                .restart_policy
                .as_deref(),
            Some("Always")
        );
    }
}
