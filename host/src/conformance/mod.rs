//! The conformance kit behind `karpenter plugin test`: what every provider
//! must do, checked against a loaded plugin one property at a time, each with
//! a precise message on failure.
//!
//! The round trip (create, get, list, delete) talks to whatever the plugin
//! talks to: its emulator, or the endpoint its configuration points at. The
//! kit creates one instance and deletes it again, whatever happens.

mod catalog;
mod lifecycle;
mod report;
mod schema;

pub use report::{Check, Outcome, Report};

use karpenter_controller::records;
use karpenter_runtime::{CallError, Plugin, wit};
use std::time::{Duration, Instant};

/// What the kit calls the plugin with.
#[derive(Debug, Clone)]
pub struct Options {
    /// The NodeClass object; an empty one of the plugin's default kind when
    /// none is given.
    pub node_class: Option<serde_json::Value>,
    /// How long a deleted instance may take to answer not-found.
    pub delete_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            node_class: None,
            delete_timeout: Duration::from_secs(60),
        }
    }
}

/// The report of a plugin that did not load because its metadata breaks
/// the contract: that is the `metadata` check's failure, and nothing else
/// can run.
pub fn unloadable(why: &str) -> Report {
    let mut report = Report::default();
    report.push("metadata", METADATA, Err(why.to_string()));
    report
}

const METADATA: &str = "metadata is well formed";

/// Runs every check against the plugin, in order; later checks that need an
/// earlier one's result fail with the reason it could not be had.
pub async fn run(plugin: &Plugin, options: &Options) -> Report {
    let mut calls = Calls::default();
    let mut report = Report::default();
    report.push(
        "metadata",
        METADATA,
        karpenter_runtime::validate::metadata(&plugin.metadata)
            .map(|()| format!("{} ({})", plugin.metadata.name, plugin.contract_version))
            .map_err(|e| format!("{e:#}")),
    );
    report.push(
        "node-class-schema",
        "each NodeClass schema is a structural OpenAPI v3 schema",
        schema::check_kinds(&plugin.metadata.node_classes),
    );

    let class = match node_class(plugin, options) {
        Ok(c) => c,
        Err(e) => {
            report.push("node-class", "the NodeClass to test with is usable", Err(e));
            return report;
        }
    };
    let validated = calls
        .track("validate-node-class", plugin.validate_node_class(&class))
        .await;
    report.push(
        "validate-node-class",
        "validate-node-class reports a Ready condition",
        match validated {
            Ok(status) => ready(&status),
            Err(e) => Err(e.to_string()),
        },
    );

    let other = calls
        .track(
            "validate-node-class",
            plugin.validate_node_class(&of_another_kind(&class)),
        )
        .await;
    report.push(
        "node-class-kind",
        "a NodeClass of a kind the plugin does not serve is refused",
        match other {
            Err(CallError::Provider {
                error: wit::Error::NodeClassNotReady(_),
                ..
            }) => Ok("node-class-not-ready".into()),
            Ok(status) if ready(&status).is_err() => Ok("not Ready".into()),
            Ok(_) => Err(format!(
                "a {OTHER_KIND} ({OTHER_GROUP}) was reported Ready: check the NodeClass's apiVersion and kind, and answer node-class-not-ready for one you do not serve"
            )),
            Err(e) => Err(format!(
                "a NodeClass of another kind must be refused with node-class-not-ready (or a status that is not Ready); validate-node-class failed with: {e}"
            )),
        },
    );

    let pool = records::bare_node_pool("conformance", node_class_ref(plugin, &class));
    let types = calls
        .track(
            "get-instance-types",
            plugin.get_instance_types_unchecked(&pool, &class),
        )
        .await
        .map_err(|e| e.to_string());
    catalog::check(&mut report, &types);
    let compact = calls
        .track(
            "get-table or get-catalog",
            plugin.compact_instance_types(&pool, &class),
        )
        .await
        .map_err(|e| e.to_string());
    let listed = match &compact {
        Ok(Some(_)) => Some(
            calls
                .track(
                    "get-instance-types",
                    plugin.listed_instance_types(&pool, &class),
                )
                .await
                .map_err(|e| e.to_string()),
        ),
        _ => None,
    };
    catalog::compact_matches(&mut report, compact, listed);

    let catalog_failed = types.is_err();
    let types = types.unwrap_or_default();
    let mut round_trip = lifecycle::RoundTrip {
        plugin,
        class: &class,
        node_class_ref: node_class_ref(plugin, &class),
        types: &types,
        catalog_failed,
        calls: &mut calls,
        delete_timeout: options.delete_timeout,
    };
    round_trip.check(&mut report).await;
    let signals = calls
        .track("interruption-signals", plugin.interruption_signals())
        .await;
    report.push(
        "interruption-signals",
        "each interruption signal names a Node condition and a reason, and gives notice",
        match signals {
            Ok(list) => interruption_signals(&list),
            Err(e) => Err(e.to_string()),
        },
    );
    calls.check(plugin, &mut report);
    report
}

fn interruption_signals(
    list: &[karpenter_runtime::bindings::interruption::InterruptionSignal],
) -> Result<String, String> {
    if list.is_empty() {
        return Ok("none".into());
    }
    let mut shown = Vec::new();
    for s in list {
        if s.condition_type.is_empty() || s.reason.is_empty() {
            return Err(format!(
                "a signal needs a condition type and a reason (condition type {:?}, reason {:?})",
                s.condition_type, s.reason
            ));
        }
        if s.notice_seconds == 0 {
            return Err(format!(
                "{} gives no notice: notice-seconds is the least time the cloud gives before it takes the instance",
                s.condition_type
            ));
        }
        shown.push(format!(
            "{}={} ({}s): {}",
            s.condition_type, s.condition_status, s.notice_seconds, s.reason
        ));
    }
    Ok(shown.join(", "))
}

fn node_class(plugin: &Plugin, options: &Options) -> Result<wit::NodeClass, String> {
    let object = match &options.node_class {
        Some(object) => object.clone(),
        None => {
            let kind = plugin
                .metadata
                .node_classes
                .first()
                .ok_or("the plugin serves no NodeClass kind")?;
            serde_json::json!({
                "apiVersion": format!("{}/{}", kind.group, kind.version),
                "kind": kind.kind,
                "metadata": {"name": "conformance", "generation": 1},
                "spec": {},
            })
        }
    };
    records::node_class(&object).map_err(|e| format!("{e:#}"))
}

const OTHER_GROUP: &str = "conformance.karpenter.invalid";
const OTHER_KIND: &str = "ConformanceOtherNodeClass";

/// The same NodeClass relabelled as a kind no plugin serves.
fn of_another_kind(class: &wit::NodeClass) -> wit::NodeClass {
    let mut object: serde_json::Value = serde_json::from_str(&class.json).unwrap_or_default();
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), format!("{OTHER_GROUP}/v1").into());
        map.insert("kind".into(), OTHER_KIND.into());
    }
    wit::NodeClass {
        name: class.name.clone(),
        generation: class.generation,
        json: object.to_string(),
    }
}

fn node_class_ref(plugin: &Plugin, class: &wit::NodeClass) -> wit::NodeClassRef {
    let object: serde_json::Value = serde_json::from_str(&class.json).unwrap_or_default();
    let (group, kind) = match (
        object["apiVersion"].as_str(),
        object["kind"].as_str(),
        plugin.metadata.node_classes.first(),
    ) {
        (Some(api_version), Some(kind), _) => (
            api_version
                .split_once('/')
                .map_or("", |(g, _)| g)
                .to_string(),
            kind.to_string(),
        ),
        (_, _, Some(k)) => (k.group.clone(), k.kind.clone()),
        _ => Default::default(),
    };
    wit::NodeClassRef {
        group,
        kind,
        name: class.name.clone(),
    }
}

fn ready(status: &wit::NodeClassStatus) -> Result<String, String> {
    match status.conditions.iter().find(|c| c.type_ == "Ready") {
        Some(c) if c.status == wit::ConditionStatus::True => Ok("Ready=True".into()),
        Some(c) => Err(format!("Ready is {}: {} {}", c.status, c.reason, c.message)),
        None => Err("status has no Ready condition".into()),
    }
}

/// Every call the kit made: how long it took and how it failed, for the
/// typed-error and sandbox checks.
#[derive(Default)]
pub(crate) struct Calls {
    made: Vec<Call>,
}

struct Call {
    name: &'static str,
    elapsed: Duration,
    /// The message of a failure that was not a typed provider error.
    untyped: Option<String>,
}

impl Calls {
    pub(crate) async fn track<T>(
        &mut self,
        name: &'static str,
        call: impl Future<Output = Result<T, CallError>>,
    ) -> Result<T, CallError> {
        let start = Instant::now();
        let result = call.await;
        let untyped = match &result {
            Err(e @ CallError::Failed { .. }) => Some(e.to_string()),
            _ => None,
        };
        self.made.push(Call {
            name,
            elapsed: start.elapsed(),
            untyped,
        });
        result
    }

    fn check(&self, plugin: &Plugin, report: &mut Report) {
        let untyped: Vec<&str> = self
            .made
            .iter()
            .filter_map(|c| c.untyped.as_deref())
            .filter(|m| !is_limit(m))
            .collect();
        report.push(
            "typed-errors",
            "every failure is one of the contract's typed errors",
            if untyped.is_empty() {
                Ok(format!("{} calls", self.made.len()))
            } else {
                Err(untyped.join("; "))
            },
        );
        let limits: Vec<&str> = self
            .made
            .iter()
            .filter_map(|c| c.untyped.as_deref())
            .filter(|m| is_limit(m))
            .collect();
        let config = plugin.config();
        let slowest = self.made.iter().max_by_key(|c| c.elapsed);
        report.push(
            "sandbox-limits",
            "every call stays within the sandbox's time, CPU and memory limits",
            if limits.is_empty() {
                Ok(format!(
                    "slowest call {} in {:.2} s (limit {} s, CPU {} ms, memory {} MiB)",
                    slowest.map_or("-", |c| c.name),
                    slowest.map_or(0.0, |c| c.elapsed.as_secs_f64()),
                    config.call_timeout_seconds,
                    config.cpu_ms,
                    config.memory_mib
                ))
            } else {
                Err(limits.join("; "))
            },
        );
    }
}

/// Whether a failure is the sandbox stopping the call (see `plugin.rs`).
fn is_limit(message: &str) -> bool {
    [
        "exceeded its CPU budget",
        "grew past its memory limit",
        "over its memory budget",
        "did not finish within",
    ]
    .iter()
    .any(|m| message.contains(m))
}
