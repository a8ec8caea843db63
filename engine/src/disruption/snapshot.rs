//! Input: everything one disruption decision depends on, as plain serde data.
//!
//! Times are Unix seconds; durations are Go duration strings ("30s", "1h30m")
//! or "Never", as they appear in the Kubernetes objects, so the host passes
//! them through untouched.

use serde::{Deserialize, Serialize};

use crate::snapshot::{
    DaemonSet, LabelSelector, Labels, NodePool, Options, Pod, ResourceList, Taint,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DisruptionSnapshot {
    /// Unix seconds: the only clock the engine sees.
    pub now: i64,
    pub node_pools: Vec<DisruptionNodePool>,
    /// Every node and NodeClaim, managed or not, with the pods bound to it.
    pub nodes: Vec<ClusterNode>,
    pub daemon_sets: Vec<DaemonSet>,
    /// Pods waiting for a node. Simulations place them too, as Karpenter's do.
    pub pending_pods: Vec<Pod>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub options: DisruptionOptions,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DisruptionOptions {
    /// How simulations schedule (the provisioner's options).
    pub scheduling: Options,
    /// The SpotToSpotConsolidation feature gate. Off: a spot node can be
    /// deleted by consolidation but not replaced by another spot node.
    pub spot_to_spot_consolidation: bool,
}

/// A NodePool: its scheduling view plus `spec.disruption` and `expireAfter`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DisruptionNodePool {
    /// Requirements, taints, limits, instance types and offerings.
    pub pool: NodePool,
    pub consolidation_policy: ConsolidationPolicy,
    /// A duration or "Never" (consolidation off, emptiness included).
    pub consolidate_after: String,
    /// An empty list allows any number of disruptions.
    pub budgets: Vec<Budget>,
    /// `spec.template.spec.expireAfter`: a duration or "Never".
    pub expire_after: String,
    /// Balanced policy: a move is approved when its savings fraction over its
    /// disruption fraction is at least `1 / consolidation_threshold`.
    pub consolidation_threshold: u32,
}

impl Default for DisruptionNodePool {
    /// Karpenter's defaults.
    fn default() -> Self {
        DisruptionNodePool {
            pool: NodePool::default(),
            consolidation_policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
            consolidate_after: "0s".to_string(),
            budgets: vec![Budget {
                nodes: "10%".to_string(),
                ..Budget::default()
            }],
            expire_after: "720h".to_string(),
            consolidation_threshold: 2,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsolidationPolicy {
    /// Only empty nodes are consolidated.
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, but a move must save enough for what
    /// it disrupts.
    Balanced,
}

/// `spec.disruption.budgets[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Budget {
    /// "N" or "N%" of the pool's nodes; percentages round up.
    pub nodes: String,
    /// Cron, UTC: five fields or a descriptor (`@daily`, ...). Active for
    /// `duration` after each time it fires; always active without it.
    pub schedule: Option<String>,
    pub duration: Option<String>,
    /// Empty: every reason.
    pub reasons: Vec<DisruptionReason>,
}

/// Why a node is disrupted; budgets are counted per reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Node repair (its own decision, [`super::repair`]).
    Unhealthy,
}

impl DisruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionReason::Underutilized => "Underutilized",
            DisruptionReason::Empty => "Empty",
            DisruptionReason::Drifted => "Drifted",
            DisruptionReason::Unhealthy => "Unhealthy",
        }
    }
}

/// A Node with its NodeClaim (or a NodeClaim without a Node yet).
///
/// Instance type, zone and capacity type are read from the well-known labels,
/// where Karpenter reads them; the price comes from the pool's offerings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterNode {
    pub name: String,
    /// `karpenter.sh/nodepool`; `None` for a node Karpenter does not manage.
    pub node_pool: Option<String>,
    pub labels: Labels,
    pub taints: Vec<Taint>,
    pub allocatable: ResourceList,
    /// Counts against NodePool limits; `allocatable` is used when absent.
    pub capacity: Option<ResourceList>,
    /// Every pod bound here that is not terminal (Succeeded or Failed),
    /// daemonset and mirror pods included.
    pub pods: Vec<NodePod>,
    /// A NodeClaim launched but without a Node yet.
    pub in_flight: bool,
    /// A NodeClaim not launched yet (see [`crate::Node::awaiting_launch`]).
    pub awaiting_launch: bool,
    pub initialized: bool,
    /// The Node's Ready condition is not True.
    pub not_ready: bool,
    /// Being deleted or already picked by a disruption command.
    pub deleting: bool,
    /// The provisioner just nominated it for a pending pod.
    pub nominated: bool,
    /// The node's `karpenter.sh/do-not-disrupt` annotation: "true", or a
    /// duration counted from `created`.
    pub do_not_disrupt: Option<String>,
    /// The NodeClaim's creation, Unix seconds.
    pub created: i64,
    /// The NodeClaim's own `spec.expireAfter`, copied from its NodePool when
    /// it was created; the NodePool's when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_after: Option<String>,
    /// When it became Initialized; `created` when absent.
    pub initialized_at: Option<i64>,
    /// `status.lastPodEventTime`; `initialized_at` when absent.
    pub last_pod_event: Option<i64>,
    /// Its `karpenter.sh/nodepool-hash` differs from the NodePool's.
    pub node_pool_hash_drifted: bool,
    /// The cloud provider's drift reason, if it says the node drifted.
    pub provider_drift: Option<String>,
    /// When it was found drifted (drift goes oldest first); `created` when absent.
    pub drifted_since: Option<i64>,
}

/// A pod bound to a node, with what disruption reads from its metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodePod {
    /// The full spec, to place it elsewhere in simulations. Its uid may be
    /// empty: namespace and name tell bound pods apart.
    pub pod: Pod,
    /// `karpenter.sh/do-not-disrupt`: "true", or a duration counted from
    /// `start_time`.
    pub do_not_disrupt: Option<String>,
    /// `controller.kubernetes.io/pod-deletion-cost`.
    pub deletion_cost: Option<String>,
    /// Owned by a DaemonSet: never rescheduled.
    pub daemon_set: bool,
    /// A static (mirror) pod: never rescheduled or evicted.
    pub mirror: bool,
    /// `status.startTime`, Unix seconds.
    pub start_time: Option<i64>,
    /// The pod's Ready condition is False.
    pub not_ready: bool,
    /// Being deleted: it neither moves nor blocks its node's disruption,
    /// unless a StatefulSet owns it (the StatefulSet recreates it only once
    /// it is gone, so its place elsewhere is held).
    pub terminating: bool,
    /// Owned by a StatefulSet.
    pub stateful_set: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodDisruptionBudget {
    pub namespace: String,
    pub name: String,
    /// `None` selects no pod; an empty selector selects every pod of the namespace.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`: pods not Ready never block.
    pub always_allow_unhealthy: bool,
}
