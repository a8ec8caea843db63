//! The Node as the controller stores it: what scheduling, registration,
//! initialization, disruption and repair read, and nothing else.
//!
//! Nodes of one NodePool, instance type and zone carry the same labels but
//! for their hostname, and the same capacity; those parts are [`Shared`], so
//! 1,000 such Nodes keep a few copies. Of the annotations, which kubelets,
//! CSI drivers and network plugins fill with the Node's own details, only
//! Karpenter's own (`karpenter.sh/...`) are kept, in the metadata: label and
//! resource maps were most of a full (trimmed) Node's heap.

use super::shared::{Shared, poolable};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Deref;

// The one label every Node has a value of its own for.
use vocabulary::labels::HOSTNAME;
/// The annotations kept: those the controller reads (do-not-disrupt).
const KARPENTER_PREFIX: &str = "karpenter.sh/";

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(from = "WireNode", into = "WireNode")]
pub struct Node {
    /// Who the Node is: its labels are in `labels` and `hostname`, read
    /// through [`Node::label`] and [`Node::labels`].
    pub metadata: ObjectMeta,
    /// The labels but `kubernetes.io/hostname`.
    pub labels: Shared<Labels>,
    /// The `kubernetes.io/hostname` label.
    pub hostname: Option<String>,
    pub spec: Option<NodeSpec>,
    pub status: Option<NodeStatus>,
}

pub type Labels = BTreeMap<String, String>;

poolable!(Labels);

/// These shadow `ResourceExt`'s, which would read the (emptied) metadata.
impl Node {
    pub fn label(&self, key: &str) -> Option<&str> {
        if key == HOSTNAME {
            return self.hostname.as_deref();
        }
        self.labels.get(key).map(String::as_str)
    }

    /// Every label, the hostname included, in no particular order.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        let hostname = self.hostname.as_deref().map(|h| (HOSTNAME, h));
        self.labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(hostname)
    }

    pub fn provider_id(&self) -> Option<&str> {
        self.spec.as_ref()?.provider_id.as_deref()
    }

    pub fn taints(&self) -> &[core::Taint] {
        self.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or_default()
    }

    pub fn conditions(&self) -> &[NodeCondition] {
        self.status
            .as_ref()
            .and_then(|s| s.health.conditions.as_deref())
            .unwrap_or_default()
    }

    pub fn is_ready(&self) -> bool {
        self.conditions()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }
}

/// The Node as the API server writes it.
#[derive(Clone, Deserialize, Serialize)]
struct WireNode {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: Option<NodeSpec>,
    status: Option<NodeStatus>,
}

impl From<WireNode> for Node {
    fn from(n: WireNode) -> Self {
        let mut metadata = n.metadata;
        let mut labels = metadata.labels.take().unwrap_or_default();
        let hostname = labels.remove(HOSTNAME);
        if let Some(a) = &mut metadata.annotations {
            a.retain(|k, _| k.starts_with(KARPENTER_PREFIX));
            if a.is_empty() {
                metadata.annotations = None;
            }
        }
        Node {
            metadata,
            labels: labels.into(),
            hostname,
            spec: n.spec,
            status: n.status,
        }
    }
}

impl From<Node> for WireNode {
    fn from(n: Node) -> Self {
        let mut metadata = n.metadata;
        let mut labels = Labels::clone(&n.labels);
        if let Some(h) = n.hostname {
            labels.insert(HOSTNAME.into(), h);
        }
        metadata.labels = (!labels.is_empty()).then_some(labels);
        WireNode {
            metadata,
            spec: n.spec,
            status: n.status,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub taints: Option<Vec<core::Taint>>,
}

/// The status: its addresses, per Node; what it reports having, which the
/// Nodes of one instance type share; its conditions, which Nodes that
/// changed state together share.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct NodeStatus {
    pub addresses: Option<Vec<core::NodeAddress>>,
    #[serde(flatten)]
    pub resources: Shared<NodeResources>,
    #[serde(flatten)]
    pub health: Shared<Health>,
}

impl Deref for NodeStatus {
    type Target = NodeResources;
    fn deref(&self) -> &NodeResources {
        &self.resources
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct NodeResources {
    pub capacity: Option<BTreeMap<String, Quantity>>,
    pub allocatable: Option<BTreeMap<String, Quantity>>,
}

poolable!(NodeResources);

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Health {
    pub conditions: Option<Vec<NodeCondition>>,
}

poolable!(Health);

/// A condition without its heartbeat and message, which differ from Node to
/// Node and which nothing here reads; repair reads the transition time.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCondition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub reason: Option<String>,
    pub last_transition_time: Option<Time>,
}

super::core_v1_resource!(Node, ClusterResourceScope, "nodes");

#[cfg(test)]
mod tests {
    use super::*;

    fn kwok_node(name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                "labels": {"kubernetes.io/hostname": name, "karpenter.sh/nodepool": "default",
                           "node.kubernetes.io/instance-type": "c-4x-amd64-linux"},
                "annotations": {"kwok.x-k8s.io/node": "fake", "example.com/nodeclaim": name,
                                "karpenter.sh/do-not-disrupt": "true"},
                "finalizers": ["karpenter.sh/termination"]},
            "spec": {"providerID": format!("kwok://{name}"),
                     "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status",
                                "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "images": [{"names": ["nginx"], "sizeBytes": 1}],
                "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                             "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        })
    }

    /// The API server's JSON parses into what a full Node holds of it, and
    /// Nodes that differ only in name share everything else.
    #[test]
    fn parses_what_a_full_node_parses_and_shares_the_rest() {
        let full: core::Node = serde_json::from_value(kwok_node("a")).expect("full node");
        let a: Node = serde_json::from_value(kwok_node("a")).expect("slim node");
        let b: Node = serde_json::from_value(kwok_node("b")).expect("slim node");

        let full_labels = full.metadata.labels.clone().expect("labels");
        let mut slim_labels: Vec<_> = a.labels().collect();
        slim_labels.sort();
        let full_labels: Vec<_> = full_labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(slim_labels, full_labels);
        assert_eq!(a.label(HOSTNAME), Some("a"));
        assert_eq!(a.label("karpenter.sh/nodepool"), Some("default"));
        assert_eq!(a.provider_id(), Some("kwok://a"));
        assert_eq!(a.taints()[0].key, "karpenter.sh/unregistered");
        assert!(a.is_ready());
        let status = a.status.as_ref().expect("status");
        assert_eq!(
            status.allocatable.as_ref().expect("allocatable")["cpu"],
            Quantity("4".into())
        );
        assert_eq!(
            status.addresses.as_ref().expect("addresses")[0].address,
            "10.0.0.1"
        );
        assert_eq!(a.metadata.finalizers, full.metadata.finalizers);
        assert_eq!(
            a.metadata.annotations,
            Some([("karpenter.sh/do-not-disrupt".into(), "true".into())].into())
        );

        assert!(std::ptr::eq(&*a.labels, &*b.labels), "labels are shared");
        let b_status = b.status.as_ref().expect("status");
        assert!(std::ptr::eq(&*status.resources, &*b_status.resources));
        assert!(std::ptr::eq(&*status.health, &*b_status.health));

        let again: Node = serde_json::from_value(serde_json::to_value(&a).expect("serializes"))
            .expect("parses again");
        assert_eq!(again, a);
    }
}
