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

/// Karpenter's `karpenter_cloudprovider_errors_total`, by the reason users
/// act on rather than by the contract's variant.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudErrorLabels {
    pub provider: String,
    pub method: String,
    /// The create error's reason (the cloud's code, e.g.
    /// "ZonalAllocationFailed"), or the variant's name in CamelCase.
    pub code: String,
}

pub struct PluginMetrics {
    pub calls: Family<CallLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<CallLabels, Histogram>,
    pub cloud_errors: Family<CloudErrorLabels, Counter>,
}

impl Default for PluginMetrics {
    fn default() -> Self {
        PluginMetrics {
            calls: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.000_01, 0.000_1, 0.001, 0.01, 0.1, 1.0, 10.0, 60.0, 300.0])
            }),
            cloud_errors: Family::default(),
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
        registry.register(
            "karpenter_cloudprovider_errors",
            "Errors of cloud provider calls, by method and reason",
            self.cloud_errors.clone(),
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
    /// The codes this plugin has reported, bounded: a plugin names its own
    /// codes, and may not grow the host's metrics without end.
    codes: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Distinct codes kept per plugin; later ones count as "Other".
const MAX_CODES: usize = 64;
/// The longest code kept; longer ones count as "Other".
const MAX_CODE_LEN: usize = 64;

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
            codes: Default::default(),
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
        match error {
            Some("trap") => self.cloud_error(call, "PluginTrap"),
            Some("timeout") => self.cloud_error(call, "PluginTimeout"),
            _ => {}
        }
    }

    /// Counts a failed call under the reason users act on.
    pub fn cloud_error(&self, call: &str, code: &str) {
        let code = {
            let mut codes = self.codes.lock().unwrap_or_else(|e| e.into_inner());
            let plain = !code.is_empty()
                && code.len() <= MAX_CODE_LEN
                && code
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-');
            if plain && (codes.contains(code) || codes.len() < MAX_CODES) {
                codes.insert(code.to_string());
                code
            } else {
                "Other"
            }
        };
        let labels = CloudErrorLabels {
            provider: self.plugin.clone(),
            method: call.to_string(),
            code: code.to_string(),
        };
        self.metrics.cloud_errors.get_or_create(&labels).inc();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn count(m: &PluginMetrics, method: &str, code: &str) -> u64 {
        m.cloud_errors
            .get_or_create(&CloudErrorLabels {
                provider: "p".into(),
                method: method.into(),
                code: code.into(),
            })
            .get()
    }

    #[test]
    fn cloud_errors_count_by_reason_and_a_plugin_cannot_grow_them_without_end() {
        let m = std::sync::Arc::new(PluginMetrics::default());
        let c = CallMetrics::new(m.clone(), "p");
        c.cloud_error("create", "ZonalAllocationFailed");
        c.cloud_error("create", "ZonalAllocationFailed");
        c.observe("create", Duration::from_millis(1), Some("timeout"));
        assert_eq!(count(&m, "create", "ZonalAllocationFailed"), 2);
        assert_eq!(count(&m, "create", "PluginTimeout"), 1);
        c.cloud_error("create", "not a code\n{}");
        c.cloud_error("create", &"X".repeat(MAX_CODE_LEN + 1));
        assert_eq!(count(&m, "create", "Other"), 2);
        for i in 0..MAX_CODES * 2 {
            c.cloud_error("get", &format!("Code{i}"));
        }
        assert_eq!(count(&m, "get", "Other"), (MAX_CODES + 2) as u64);
    }
}
