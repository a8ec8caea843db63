//! autoscaling.x-k8s.io/v1beta1 CapacityBuffer, the API Cluster Autoscaler
//! and Karpenter share for spare capacity (Karpenter's `CapacityBuffer`
//! feature gate). Its CRD is
//! charts/karpenter/crds/autoscaling.x-k8s.io_capacitybuffers.yaml.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The one provisioning strategy an autoscaler acts on: buffers with
/// another strategy are meant for something else and are left alone.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

#[derive(CustomResource, Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    shortname = "cb",
    category = "autoscaling",
    namespaced
)]
#[kube(status = "CapacityBufferStatus")]
#[kube(
    printcolumn = r#"{"name": "Strategy", "type": "string", "jsonPath": ".spec.provisioningStrategy", "description": "The provisioning strategy."}"#,
    printcolumn = r#"{"name": "PodTemplate", "type": "string", "jsonPath": ".status.podTemplateRef.name", "description": "The PodTemplate a chunk is made from."}"#,
    printcolumn = r#"{"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas", "description": "How many chunks are kept."}"#,
    printcolumn = r#"{"name": "ConditionsType", "type": "string", "jsonPath": ".status.conditions[*].type", "description": "Every condition's type."}"#,
    printcolumn = r#"{"name": "ConditionsStatus", "type": "string", "jsonPath": ".status.conditions[*].status", "description": "Every condition's status."}"#,
    printcolumn = r#"{"name": "ConditionsReason", "type": "string", "jsonPath": ".status.conditions[*].reason", "description": "Every condition's reason."}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate of the buffer's namespace: the shape of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, StatefulSet or ReplicaSet whose pod template is the
    /// chunk and whose replicas `percentage` is taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// The chunks' total requests stay within these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub struct LocalObjectRef {
    pub name: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}
