//! karpenter.sh/v1 NodeClaim: the request for one machine, and its state. Its
//! CRD is charts/karpenter/crds/karpenter.sh_nodeclaims.yaml.
//!
//! The controller keeps every NodeClaim in memory, and those of one NodePool
//! and instance type mostly say the same: their requirements, requests and
//! resources are [`Shared`] between the NodeClaims that carry equal ones.

use super::nodepool::{NodeClassReference, NodeSelectorRequirementWithMinValues};
use crate::slim::shared::{Shared, poolable};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Condition types, in the order a NodeClaim passes them.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const DRIFTED: &str = "Drifted";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRAINED: &str = "Drained";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
}

#[derive(CustomResource, Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    category = "karpenter"
)]
#[kube(status = "NodeClaimStatus")]
#[kube(
    printcolumn = r#"{"name": "Type", "type": "string", "jsonPath": ".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name": "Capacity", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name": "Zone", "type": "string", "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name": "Node", "type": "string", "jsonPath": ".status.nodeName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "ImageID", "type": "string", "jsonPath": ".status.imageID", "priority": 1}"#,
    printcolumn = r#"{"name": "ID", "type": "string", "jsonPath": ".status.providerID", "priority": 1}"#,
    printcolumn = r#"{"name": "NodePool", "type": "string", "jsonPath": ".metadata.labels.karpenter\\.sh/nodepool", "priority": 1}"#,
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.nodeClassRef.name", "priority": 1}"#,
    printcolumn = r#"{"name": "Drifted", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Drifted\")].status", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[serde(default)]
    pub requirements: Shared<Requirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Shared<ResourceRequirements>>,
    pub node_class_ref: NodeClassReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub capacity: Shared<ResourceList>,
    #[serde(default, skip_serializing_if = "is_empty")]
    pub allocatable: Shared<ResourceList>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

pub type Requirements = Vec<NodeSelectorRequirementWithMinValues>;
pub type ResourceList = BTreeMap<String, Quantity>;

fn is_empty(list: &Shared<ResourceList>) -> bool {
    list.is_empty()
}

poolable!(Requirements, ResourceRequirements, ResourceList);

impl NodeClaim {
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }

    pub fn provider_id(&self) -> Option<&str> {
        self.status.as_ref()?.provider_id.as_deref()
    }

    pub fn node_name(&self) -> Option<&str> {
        self.status.as_ref()?.node_name.as_deref()
    }

    pub fn node_pool(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(vocabulary::labels::NODE_POOL)
            .map(String::as_str)
    }
}
