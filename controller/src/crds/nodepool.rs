//! karpenter.sh/v1 NodePool. Its CRD is
//! charts/karpenter/crds/karpenter.sh_nodepools.yaml.

use k8s_openapi::api::core::v1::Taint;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(CustomResource, Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    category = "karpenter"
)]
#[kube(status = "NodePoolStatus")]
#[kube(scale(
    spec_replicas_path = ".spec.replicas",
    status_replicas_path = ".status.nodes"
))]
#[kube(
    printcolumn = r#"{"name": "NodeClass", "type": "string", "jsonPath": ".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name": "Nodes", "type": "string", "jsonPath": ".status.nodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Weight", "type": "integer", "jsonPath": ".spec.weight", "priority": 1}"#,
    printcolumn = r#"{"name": "CPU", "type": "string", "jsonPath": ".status.resources.cpu", "priority": 1}"#,
    printcolumn = r#"{"name": "Memory", "type": "string", "jsonPath": ".status.resources.memory", "priority": 1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    /// Resource limits, also `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[serde(default)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    pub node_class_ref: NodeClassReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
}

#[derive(
    Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidation_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consolidate_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<Vec<Budget>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources:
        Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// The NodeClass generation last seen, so node registration health is
    /// judged afresh when the NodeClass changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}
