//! Per-plugin call metrics: count, errors by kind, latency.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub plugin: String,
    pub call: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub plugin: String,
    pub call: String,
    /// "trap", "timeout" or the provider's typed error.
    pub kind: String,
}

pub struct PluginMetrics {
    pub calls: Family<CallLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<CallLabels, Histogram>,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        PluginMetrics {
            calls: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.000_01, 0.000_1, 0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 300.0])
            }),
        }
    }
}

impl PluginMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_plugin_calls",
            "Calls into provider plugins",
            self.calls.clone(),
        );
        registry.register(
            "karpenter_plugin_call_errors",
            "Failed plugin calls by kind",
            self.errors.clone(),
        );
        registry.register(
            "karpenter_plugin_call_duration_seconds",
            "Latency of plugin calls",
            self.duration.clone(),
        );
    }

    pub fn observe(&self, plugin: &str, call: &str, elapsed: Duration, error: Option<&str>) {
        let labels = CallLabels {
            plugin: plugin.to_string(),
            call: call.to_string(),
        };
        self.calls.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if let Some(kind) = error {
            let labels = ErrorLabels {
                plugin: plugin.to_string(),
                call: call.to_string(),
                kind: kind.to_string(),
            };
            self.errors.get_or_create(&labels).inc();
        }
    }
}

/// The calls of the contract, whose metric handles are resolved up front.
pub const CALLS: [&str; 9] = [
    "metadata",
    "validate-node-class",
    "get-instance-types",
    "create",
    "delete",
    "get",
    "list-instances",
    "is-drifted",
    "repair-policies",
];

/// One plugin's handles, resolved once so a successful call costs two atomic
/// updates instead of label allocations and map lookups.
pub struct CallMetrics {
    plugin: String,
    metrics: std::sync::Arc<PluginMetrics>,
    handles: Vec<(&'static str, Counter, Histogram)>,
}

impl CallMetrics {
    pub fn new(metrics: std::sync::Arc<PluginMetrics>, plugin: &str) -> Self {
        let handles = CALLS
            .iter()
            .map(|call| {
                let labels = CallLabels {
                    plugin: plugin.to_string(),
                    call: call.to_string(),
                };
                (
                    *call,
                    metrics.calls.get_or_create(&labels).clone(),
                    metrics.duration.get_or_create(&labels).clone(),
                )
            })
            .collect();
        CallMetrics {
            plugin: plugin.to_string(),
            metrics,
            handles,
        }
    }

    pub fn observe(&self, call: &'static str, elapsed: Duration, error: Option<&str>) {
        match self.handles.iter().find(|(c, _, _)| *c == call) {
            Some((_, count, duration)) => {
                count.inc();
                duration.observe(elapsed.as_secs_f64());
                if let Some(kind) = error {
                    self.error(call, kind);
                }
            }
            None => self.metrics.observe(&self.plugin, call, elapsed, error),
        }
    }

    /// Counts a failed call of this kind (a trap, a timeout, a typed error).
    pub fn error(&self, call: &str, kind: &str) {
        let labels = ErrorLabels {
            plugin: self.plugin.clone(),
            call: call.to_string(),
            kind: kind.to_string(),
        };
        self.metrics.errors.get_or_create(&labels).inc();
    }
}
