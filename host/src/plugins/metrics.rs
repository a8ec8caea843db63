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
