//! Input types: a plain-data picture of the cluster the host builds from
//! Kubernetes objects and cloud-provider plugin results.
//!
//! Everything is owned strings and integers so that the host can build a
//! `Snapshot` without knowing how the engine represents it internally.
//! Resource amounts are integers in canonical units: milli-units for `cpu`,
//! bytes for `memory` and `ephemeral-storage`, plain counts for everything
//! else (see [`crate::quantity`]).

use serde::{Deserialize, Serialize};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

pub use crate::map::StringMap;

/// Resource name -> amount in canonical units (`cpu` in millis, bytes, counts).
pub type ResourceList = StringMap<i64>;

/// Label key -> value.
pub type Labels = StringMap<String>;

/// Everything one provisioning decision depends on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Snapshot {
    pub node_pools: Vec<NodePool>,
    /// Existing nodes and in-flight NodeClaims.
    pub nodes: Vec<Node>,
    pub daemon_sets: Vec<DaemonSet>,
    /// Pending pods to place.
    pub pods: Vec<Pod>,
    pub options: Options,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    /// A new NodeClaim keeps at most this many (cheapest) instance types.
    pub max_instance_types: usize,
    /// Karpenter's `ReservedCapacity` gate (on by default, as upstream):
    /// when off, reserved offerings are never launched.
    pub reserved_capacity: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            max_instance_types: 600,
            reserved_capacity: true,
        }
    }
}

/// `Respect`: preferences are treated as required, then relaxed one at a time.
/// `Ignore`: preferences play no part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreferencePolicy {
    #[default]
    Respect,
    Ignore,
}

/// `Strict`: a NodeClaim that cannot keep `minValues` distinct values is not made.
/// `BestEffort`: it is made with as many values as remain.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MinValuesPolicy {
    #[default]
    Strict,
    BestEffort,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodePool {
    pub name: String,
    /// 0..=100; higher is tried first.
    pub weight: i32,
    /// `spec.template.metadata.labels`.
    pub labels: Labels,
    pub taints: Vec<Taint>,
    /// Ignored for scheduling, as Karpenter does: they are expected to go away.
    pub startup_taints: Vec<Taint>,
    pub requirements: Vec<Requirement>,
    /// `spec.limits`, including `nodes`.
    pub limits: ResourceList,
    /// What the cloud provider offers for this pool, available or not.
    /// Shared: the host keeps one copy per pool and catalog, and every
    /// snapshot and decision it builds points at it.
    pub instance_types: Arc<[InstanceType]>,
    /// `spec.replicas` of a static NodePool: it keeps that many nodes
    /// whatever the pods ([`crate::static_pool`]); pending pods get no
    /// NodeClaim from it and its nodes are never consolidated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<u32>,
}

/// A node selector requirement, as in NodePool and pod node affinity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    #[serde(default)]
    pub values: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

impl Requirement {
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        Requirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }
}

pub use vocabulary::Operator;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceType {
    pub name: String,
    /// Must define the well-known labels (arch, os, instance type, ...).
    pub requirements: Vec<Requirement>,
    pub offerings: Vec<Offering>,
    pub capacity: ResourceList,
    pub overhead: Overhead,
    /// The NodeOverlays that added to `capacity`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capacity_overlays: Vec<String>,
}

impl InstanceType {
    /// What pods may use: the capacity less every reservation.
    pub fn allocatable(&self) -> ResourceList {
        let mut out = self.capacity.clone();
        for reserved in [
            &self.overhead.kube_reserved,
            &self.overhead.system_reserved,
            &self.overhead.eviction_threshold,
        ] {
            for (k, v) in reserved.iter() {
                *out.entry_or_insert_with(k, || 0) -= v;
            }
        }
        out
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Overhead {
    pub kube_reserved: ResourceList,
    pub system_reserved: ResourceList,
    pub eviction_threshold: ResourceList,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Offering {
    /// `topology.kubernetes.io/zone`; `None` fits any zone.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`: spot, on-demand or reserved.
    pub capacity_type: String,
    /// $/hour.
    pub price: f64,
    pub available: bool,
    /// For reserved offerings: instances left in the reservation, counting
    /// what the provider launched; `Some(0)` makes it unusable. Offerings
    /// with the same further `requirements` (with none: the same type and
    /// zone) draw on one reservation.
    pub reservation_capacity: Option<u32>,
    /// Further offering requirements (for example a reservation id).
    pub requirements: Vec<Requirement>,
    /// The NodeOverlay that set `price`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_overlay: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    pub name: String,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub allocatable: ResourceList,
    /// Counts against NodePool limits; `allocatable` is used when absent.
    pub capacity: Option<ResourceList>,
    /// Pods already bound (or nominated) here, including daemonset pods.
    pub pods: Vec<BoundPod>,
    pub initialized: bool,
    /// `karpenter.sh/nodepool` of a managed node.
    pub node_pool: Option<String>,
    /// A NodeClaim launched but not yet registered as a Node.
    pub in_flight: bool,
    /// A NodeClaim its provider has not launched yet: a reservation it is
    /// narrowed to is not in the provider's count, so it holds a slot here.
    pub awaiting_launch: bool,
}

/// A pod already on a node. Of its template, the scheduler reads what it
/// uses (requests, host ports) and what it says about its neighbours
/// (labels; required anti-affinity terms, which keep new pods away too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    #[serde(flatten)]
    pub template: Arc<PodTemplate>,
}

impl Deref for BoundPod {
    type Target = PodTemplate;
    fn deref(&self) -> &PodTemplate {
        &self.template
    }
}

impl DerefMut for BoundPod {
    fn deref_mut(&mut self) -> &mut PodTemplate {
        Arc::make_mut(&mut self.template)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonSet {
    pub namespace: String,
    pub name: String,
    /// The pod template's summed requests.
    pub requests: ResourceList,
    pub tolerations: Vec<Toleration>,
    pub node_selector: Labels,
    pub node_affinity: Option<NodeAffinity>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Any value that sorts like the creation time (for example Unix millis).
    pub creation: i64,
    /// Read through `Deref` (`pod.labels`); written with `DerefMut`, which
    /// copies it first if other pods share it.
    #[serde(flatten)]
    pub template: Arc<PodTemplate>,
    /// A CapacityBuffer's virtual pod ("namespace/name" of the buffer): it
    /// holds room for a pod that does not exist yet (see [`crate::buffer`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buffer: Option<String>,
    /// The node an earlier plan put this pod on (a Node's name, or an
    /// in-flight NodeClaim's), tried before any other. Pods re-planned while
    /// they wait for the nodes made for them keep to those nodes: placed
    /// first-fit instead, they can fragment the nodes and launch more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_node: Option<String>,
}

impl Deref for Pod {
    type Target = PodTemplate;
    fn deref(&self) -> &PodTemplate {
        &self.template
    }
}

impl DerefMut for Pod {
    fn deref_mut(&mut self) -> &mut PodTemplate {
        Arc::make_mut(&mut self.template)
    }
}

/// What a pod's template decides, and so what the pods of one template
/// share: a snapshot of 10,000 pods from a few Deployments holds a few of
/// these, not 10,000 copies of each label, request and toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct PodTemplate {
    pub labels: Labels,
    /// Summed container requests; `pods: 1` is implied.
    pub requests: ResourceList,
    pub node_selector: Labels,
    pub affinity: Affinity,
    pub tolerations: Vec<Toleration>,
    pub host_ports: Vec<HostPort>,
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    pub priority: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Affinity {
    pub node_affinity: Option<NodeAffinity>,
    pub pod_affinity: Option<PodAffinity>,
    pub pod_anti_affinity: Option<PodAffinity>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeAffinity {
    /// ORed terms; each term's expressions are ANDed.
    pub required: Vec<NodeSelectorTerm>,
    pub preferred: Vec<PreferredSchedulingTerm>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeSelectorTerm {
    pub match_expressions: Vec<Requirement>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct PreferredSchedulingTerm {
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct PodAffinity {
    pub required: Vec<PodAffinityTerm>,
    pub preferred: Vec<WeightedPodAffinityTerm>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct PodAffinityTerm {
    /// `None` selects no pod.
    pub label_selector: Option<LabelSelector>,
    /// Empty means the pod's own namespace.
    pub namespaces: Vec<String>,
    pub topology_key: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct WeightedPodAffinityTerm {
    pub weight: i32,
    pub term: PodAffinityTerm,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct LabelSelector {
    pub match_labels: Labels,
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LabelSelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopologySpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `None` selects no pod.
    #[serde(default)]
    pub label_selector: Option<LabelSelector>,
    #[serde(default)]
    pub min_domains: Option<i32>,
    #[serde(default)]
    pub node_affinity_policy: NodeInclusionPolicy,
    /// Accepted for completeness; domains always come from every NodePool.
    #[serde(default = "NodeInclusionPolicy::ignore")]
    pub node_taints_policy: NodeInclusionPolicy,
    #[serde(default)]
    pub match_label_keys: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WhenUnsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum NodeInclusionPolicy {
    #[default]
    Honor,
    Ignore,
}

impl NodeInclusionPolicy {
    fn ignore() -> Self {
        NodeInclusionPolicy::Ignore
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

impl Taint {
    /// Karpenter's known ephemeral taints: a node carries them while it
    /// starts (not ready yet, no cloud provider yet, not registered, a
    /// readiness rule not met yet), so on a
    /// managed node that is not initialized they do not keep pods away.
    pub fn is_ephemeral(&self) -> bool {
        use TaintEffect::*;
        use vocabulary::taints::{
            CLOUD_UNINITIALIZED, NOT_READY, READINESS_PREFIX, UNREACHABLE, UNREGISTERED,
        };
        match (self.key.as_str(), self.effect) {
            (key, _) if key.starts_with(READINESS_PREFIX) => true,
            (NOT_READY, NoSchedule | NoExecute) => true,
            (UNREACHABLE, NoSchedule) => true,
            (CLOUD_UNINITIALIZED, NoSchedule) => self.value == "true",
            (UNREGISTERED, NoExecute) => true,
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
pub struct Toleration {
    /// Empty with `Exists` tolerates everything.
    pub key: String,
    pub operator: TolerationOperator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    #[default]
    Equal,
    Exists,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default)]
pub struct HostPort {
    pub port: u16,
    /// TCP when empty.
    pub protocol: String,
    /// Every address when empty or 0.0.0.0.
    pub host_ip: String,
}
