//! The controller's Prometheus metrics, named as Karpenter names them so
//! existing dashboards keep working.

use super::uid;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub nodepool: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UsageLabels {
    pub nodepool: String,
    pub resource_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// "delete" or "replace".
    pub decision: String,
    pub reason: String,
    /// "empty", "single", "multi" or "" (drift).
    pub consolidation_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub nodepool: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InterruptionLabels {
    /// The interruption signal's reason, e.g. "SpotInterrupted".
    pub message_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// The HTTP status of the eviction's answer, "0" if none came.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AllowedLabels {
    pub nodepool: String,
    pub reason: String,
}

pub struct Metrics {
    pub decisions: Family<DecisionLabels, Counter>,
    pub disrupted: Family<DisruptedLabels, Counter>,
    pub nodes_terminated: Family<PoolLabels, Counter>,
    /// Nodes that joined for a NodeClaim.
    pub nodes_created: Family<PoolLabels, Counter>,
    /// From a node's deletion to its finalizer's removal.
    pub termination_duration: Histogram,
    pub disruption_duration: Histogram,
    pub created: Family<CreatedLabels, Counter>,
    pub launched: Family<PoolLabels, Counter>,
    pub registered: Family<PoolLabels, Counter>,
    pub initialized: Family<PoolLabels, Counter>,
    pub terminated: Family<PoolLabels, Counter>,
    pub scheduling_duration: Histogram,
    pub pod_startup: Histogram,
    pub usage: Family<UsageLabels, Gauge<f64, AtomicU64>>,
    pub limit: Family<UsageLabels, Gauge<f64, AtomicU64>>,
    pub leader: Gauge,
    /// Pods pending in the provisioner's last batch, and those of them no
    /// NodePool could take.
    pub queue_depth: Gauge,
    pub unschedulable: Gauge,
    pub evictions: Family<EvictionLabels, Counter>,
    pub interruptions: Family<InterruptionLabels, Counter>,
    /// Nodes each NodePool's budgets let disruption take now, by reason.
    pub allowed_disruptions: Family<AllowedLabels, Gauge>,
    /// Pods whose startup was already observed, so each counts once.
    /// The pods seen running, by [`uid::key`]: 16 bytes each rather than a
    /// 36-character string, at one entry per running pod.
    started: Mutex<HashSet<u128>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            decisions: Family::default(),
            disrupted: Family::default(),
            nodes_terminated: Family::default(),
            nodes_created: Family::default(),
            termination_duration: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            disruption_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            created: Family::default(),
            launched: Family::default(),
            registered: Family::default(),
            initialized: Family::default(),
            terminated: Family::default(),
            scheduling_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            pod_startup: Histogram::new(exponential_buckets(0.5, 2.0, 14)),
            usage: Family::default(),
            limit: Family::default(),
            leader: Gauge::default(),
            queue_depth: Gauge::default(),
            unschedulable: Gauge::default(),
            evictions: Family::default(),
            interruptions: Family::default(),
            allowed_disruptions: Family::default(),
            started: Mutex::default(),
        }
    }
}

impl Metrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "karpenter_voluntary_disruption_decisions",
            "Disruption decisions carried out, by decision, reason and consolidation type",
            self.decisions.clone(),
        );
        r.register(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of one disruption decision",
            self.disruption_duration.clone(),
        );
        r.register(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims disrupted, by NodePool and reason",
            self.disrupted.clone(),
        );
        r.register(
            "karpenter_nodes_terminated",
            "Nodes drained and released",
            self.nodes_terminated.clone(),
        );
        r.register(
            "karpenter_nodes_created",
            "Nodes that registered for a NodeClaim, by NodePool",
            self.nodes_created.clone(),
        );
        r.register(
            "karpenter_nodes_termination_duration_seconds",
            "Time from a node's deletion to the removal of its termination finalizer",
            self.termination_duration.clone(),
        );
        r.register(
            "karpenter_nodeclaims_created",
            "NodeClaims created, by NodePool and reason",
            self.created.clone(),
        );
        r.register(
            "karpenter_nodeclaims_launched",
            "NodeClaims launched by their provider",
            self.launched.clone(),
        );
        r.register(
            "karpenter_nodeclaims_registered",
            "NodeClaims whose Node registered",
            self.registered.clone(),
        );
        r.register(
            "karpenter_nodeclaims_initialized",
            "NodeClaims whose Node initialized",
            self.initialized.clone(),
        );
        r.register(
            "karpenter_nodeclaims_terminated",
            "NodeClaims whose instance was deleted",
            self.terminated.clone(),
        );
        r.register(
            "karpenter_provisioner_scheduling_duration_seconds",
            "Duration of one scheduling simulation",
            self.scheduling_duration.clone(),
        );
        r.register(
            "karpenter_pods_startup_duration_seconds",
            "Time from pod creation until it runs",
            self.pod_startup.clone(),
        );
        r.register(
            "karpenter_nodepools_usage",
            "Resources used by each NodePool's nodes",
            self.usage.clone(),
        );
        r.register(
            "karpenter_nodepools_limit",
            "Each NodePool's limits",
            self.limit.clone(),
        );
        r.register(
            "karpenter_leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        r.register(
            "karpenter_scheduler_queue_depth",
            "Pods pending in the provisioner's last batch",
            self.queue_depth.clone(),
        );
        r.register(
            "karpenter_scheduler_unschedulable_pods_count",
            "Pods of the provisioner's last batch that no NodePool can take",
            self.unschedulable.clone(),
        );
        r.register(
            "karpenter_nodes_eviction_requests",
            "Evictions asked while draining nodes, by the answer's HTTP status",
            self.evictions.clone(),
        );
        r.register(
            "karpenter_interruption_received_messages",
            "Interruption notices acted on (a node condition matching its plugin's signal), by reason",
            self.interruptions.clone(),
        );
        r.register(
            "karpenter_nodepools_allowed_disruptions",
            "Nodes each NodePool's disruption budgets allow disrupting now, by reason",
            self.allowed_disruptions.clone(),
        );
    }

    pub fn evicted(&self, code: u16) {
        self.evictions
            .get_or_create(&EvictionLabels {
                code: code.to_string(),
            })
            .inc();
    }

    /// A resource amount in the engine's canonical units as Prometheus
    /// reports it: cores rather than millicores, the rest as they are.
    pub fn in_metric_units(resource: &str, canonical: i64) -> f64 {
        if resource == vocabulary::resources::CPU {
            canonical as f64 / 1000.0
        } else {
            canonical as f64
        }
    }

    pub fn pool(nodepool: &str) -> PoolLabels {
        PoolLabels {
            nodepool: nodepool.to_string(),
        }
    }

    /// Observes a pod's startup the first time it is seen running.
    pub fn pod_running(&self, uid: &str, seconds: f64) {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        if started.insert(uid::key(uid)) {
            self.pod_startup.observe(seconds.max(0.0));
        }
    }

    /// Marks a pod as already running without observing it.
    pub fn pod_seen(&self, uid: &str) {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        started.insert(uid::key(uid));
    }

    pub fn pod_gone(&self, uid: &str) {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        started.remove(&uid::key(uid));
    }
}
