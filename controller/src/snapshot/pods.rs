//! Pods and DaemonSets into the engine.

use super::labels;
use super::pod_requests::{default_requests_to_limits, requests};
use crate::slim;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use std::collections::HashMap;
use std::sync::Arc;

fn host_ports(spec: &slim::PodSpec) -> Vec<engine::HostPort> {
    let mut out = Vec::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        for p in c.ports.iter().flatten() {
            if let Some(port) = p
                .host_port
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
            {
                out.push(engine::HostPort {
                    port,
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                });
            }
        }
    }
    out
}

fn node_requirement(r: &core::NodeSelectorRequirement) -> anyhow::Result<engine::Requirement> {
    let operator = r
        .operator
        .parse()
        .with_context(|| format!("node selector {}", r.key))?;
    Ok(engine::Requirement {
        key: r.key.clone(),
        operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    })
}

fn term(t: &core::NodeSelectorTerm) -> anyhow::Result<engine::NodeSelectorTerm> {
    Ok(engine::NodeSelectorTerm {
        match_expressions: t
            .match_expressions
            .iter()
            .flatten()
            .map(node_requirement)
            .collect::<anyhow::Result<_>>()?,
    })
}

pub fn node_affinity(a: &core::NodeAffinity) -> anyhow::Result<engine::NodeAffinity> {
    Ok(engine::NodeAffinity {
        required: a
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flat_map(|s| s.node_selector_terms.iter())
            .map(term)
            .collect::<anyhow::Result<_>>()?,
        preferred: a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .map(|p| {
                Ok(engine::PreferredSchedulingTerm {
                    weight: p.weight,
                    preference: term(&p.preference)?,
                })
            })
            .collect::<anyhow::Result<_>>()?,
    })
}

pub fn label_selector(s: &meta::LabelSelector) -> anyhow::Result<engine::LabelSelector> {
    Ok(engine::LabelSelector {
        match_labels: labels(s.match_labels.as_ref()),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                let operator = match e.operator.as_str() {
                    "In" => engine::SelectorOperator::In,
                    "NotIn" => engine::SelectorOperator::NotIn,
                    "Exists" => engine::SelectorOperator::Exists,
                    "DoesNotExist" => engine::SelectorOperator::DoesNotExist,
                    other => bail!("label selector {}: unknown operator {other:?}", e.key),
                };
                Ok(engine::LabelSelectorRequirement {
                    key: e.key.clone(),
                    operator,
                    values: e.values.clone().unwrap_or_default(),
                })
            })
            .collect::<anyhow::Result<_>>()?,
    })
}

fn affinity_term(t: &core::PodAffinityTerm) -> anyhow::Result<engine::PodAffinityTerm> {
    Ok(engine::PodAffinityTerm {
        label_selector: t.label_selector.as_ref().map(label_selector).transpose()?,
        namespaces: t.namespaces.clone().unwrap_or_default(),
        topology_key: t.topology_key.clone(),
    })
}

fn pod_affinity(
    required: Option<&Vec<core::PodAffinityTerm>>,
    preferred: Option<&Vec<core::WeightedPodAffinityTerm>>,
) -> anyhow::Result<engine::PodAffinity> {
    Ok(engine::PodAffinity {
        required: required
            .into_iter()
            .flatten()
            .map(affinity_term)
            .collect::<anyhow::Result<_>>()?,
        preferred: preferred
            .into_iter()
            .flatten()
            .map(|w| {
                Ok(engine::WeightedPodAffinityTerm {
                    weight: w.weight,
                    term: affinity_term(&w.pod_affinity_term)?,
                })
            })
            .collect::<anyhow::Result<_>>()?,
    })
}

fn affinity_of(a: &core::PodAffinity) -> anyhow::Result<engine::PodAffinity> {
    pod_affinity(
        a.required_during_scheduling_ignored_during_execution
            .as_ref(),
        a.preferred_during_scheduling_ignored_during_execution
            .as_ref(),
    )
}

fn anti_affinity_of(a: &core::PodAntiAffinity) -> anyhow::Result<engine::PodAffinity> {
    pod_affinity(
        a.required_during_scheduling_ignored_during_execution
            .as_ref(),
        a.preferred_during_scheduling_ignored_during_execution
            .as_ref(),
    )
}

pub fn tolerations(
    list: Option<&Vec<core::Toleration>>,
) -> anyhow::Result<Vec<engine::Toleration>> {
    list.into_iter()
        .flatten()
        .map(|t| {
            Ok(engine::Toleration {
                key: t.key.clone().unwrap_or_default(),
                operator: match t.operator.as_deref() {
                    Some("Exists") => engine::TolerationOperator::Exists,
                    None | Some("Equal") => engine::TolerationOperator::Equal,
                    Some(other) => bail!("toleration {:?}: unknown operator {other:?}", t.key),
                },
                value: t.value.clone().unwrap_or_default(),
                effect: t
                    .effect
                    .as_deref()
                    .filter(|e| !e.is_empty())
                    .map(super::nodes::effect)
                    .transpose()?,
            })
        })
        .collect()
}

fn spread(c: &core::TopologySpreadConstraint) -> anyhow::Result<engine::TopologySpreadConstraint> {
    let policy =
        |p: Option<&String>, default: engine::NodeInclusionPolicy| match p.map(String::as_str) {
            Some("Honor") => engine::NodeInclusionPolicy::Honor,
            Some("Ignore") => engine::NodeInclusionPolicy::Ignore,
            _ => default,
        };
    Ok(engine::TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable: match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => engine::WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => engine::WhenUnsatisfiable::ScheduleAnyway,
            other => bail!(
                "topology spread on {}: unknown whenUnsatisfiable {other:?}",
                c.topology_key
            ),
        },
        label_selector: c.label_selector.as_ref().map(label_selector).transpose()?,
        min_domains: c.min_domains,
        node_affinity_policy: policy(
            c.node_affinity_policy.as_ref(),
            engine::NodeInclusionPolicy::Honor,
        ),
        node_taints_policy: policy(
            c.node_taints_policy.as_ref(),
            engine::NodeInclusionPolicy::Ignore,
        ),
        match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
    })
}

/// The engine's pods for one snapshot, converting each template once.
///
/// The pods of one ReplicaSet hold the same shared lineage and template
/// (see [`slim::Shared`]), so those two say which engine template a pod
/// gets. Each key keeps its two values alive, so no address is reused
/// while the map lives.
#[derive(Default)]
pub struct Pods {
    templates: HashMap<(usize, usize), Held>,
}

struct Held {
    _lineage: slim::Shared<slim::pod::Lineage>,
    _template: slim::Shared<slim::pod::Template>,
    engine: Arc<engine::PodTemplate>,
}

impl Pods {
    /// A pending pod. `creation` orders pods created at the same instant;
    /// the caller passes the creation timestamp in seconds (or an index for
    /// files).
    pub fn pod(&mut self, p: &slim::Pod, creation: i64) -> anyhow::Result<engine::Pod> {
        let name = p.metadata.name.clone().unwrap_or_default();
        Ok(engine::Pod {
            template: self.template(p)?,
            namespace: namespace(p),
            uid: p.metadata.uid.clone().unwrap_or_else(|| name.clone()),
            name,
            creation,
            buffer: None,
            nominated_node: None,
        })
    }

    /// A pod on a node as disruption simulates moving it: [`Pods::pod`]
    /// without the uid, which nothing reads of a bound pod (its namespace
    /// and name are unique on a live cluster) and which every pass would
    /// copy 10,000 times at 10,000 pods.
    pub fn on_node(&mut self, p: &slim::Pod, creation: i64) -> anyhow::Result<engine::Pod> {
        Ok(engine::Pod {
            template: self.template(p)?,
            namespace: namespace(p),
            uid: String::new(),
            name: p.metadata.name.clone().unwrap_or_default(),
            creation,
            buffer: None,
            nominated_node: None,
        })
    }

    /// A pod already bound to a node.
    pub fn bound(&mut self, p: &slim::Pod) -> anyhow::Result<engine::BoundPod> {
        Ok(engine::BoundPod {
            template: self.template(p)?,
            namespace: namespace(p),
            name: p.metadata.name.clone().unwrap_or_default(),
        })
    }

    fn template(&mut self, p: &slim::Pod) -> anyhow::Result<Arc<engine::PodTemplate>> {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let spec = p
            .spec
            .as_ref()
            .with_context(|| format!("pod {name}: pod has no spec"))?;
        let key = (
            slim::Shared::addr(&p.lineage),
            slim::Shared::addr(&spec.template),
        );
        if let Some(held) = self.templates.get(&key) {
            return Ok(held.engine.clone());
        }
        let engine = Arc::new(template(p, spec).with_context(|| format!("pod {name}"))?);
        self.templates.insert(
            key,
            Held {
                _lineage: p.lineage.clone(),
                _template: spec.template.clone(),
                engine: engine.clone(),
            },
        );
        Ok(engine)
    }
}

fn namespace(p: &slim::Pod) -> String {
    p.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// What the pod's labels and template ask of a node.
fn template(p: &slim::Pod, spec: &slim::PodSpec) -> anyhow::Result<engine::PodTemplate> {
    let affinity = spec.affinity.clone().unwrap_or_default();
    Ok(engine::PodTemplate {
        labels: labels(Some(p.labels())),
        requests: requests(spec)?,
        node_selector: labels(spec.node_selector.as_ref()),
        affinity: engine::Affinity {
            node_affinity: affinity
                .node_affinity
                .as_ref()
                .map(node_affinity)
                .transpose()?,
            pod_affinity: affinity
                .pod_affinity
                .as_ref()
                .map(affinity_of)
                .transpose()?,
            pod_anti_affinity: affinity
                .pod_anti_affinity
                .as_ref()
                .map(anti_affinity_of)
                .transpose()?,
        },
        tolerations: tolerations(spec.tolerations.as_ref())?,
        host_ports: host_ports(spec),
        topology_spread_constraints: spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .map(spread)
            .collect::<anyhow::Result<_>>()?,
        priority: spec.priority.unwrap_or(0),
    })
}

pub fn daemon_set(ds: &k8s_openapi::api::apps::v1::DaemonSet) -> anyhow::Result<engine::DaemonSet> {
    let name = ds.metadata.name.clone().unwrap_or_default();
    let build = || -> anyhow::Result<engine::DaemonSet> {
        let mut template = ds.spec.template.spec.clone().unwrap_or_default();
        default_requests_to_limits(&mut template);
        let spec = slim::PodSpec::from(template);
        Ok(engine::DaemonSet {
            namespace: ds
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: name.clone(),
            requests: requests(&spec)?,
            tolerations: tolerations(spec.tolerations.as_ref())?,
            node_selector: labels(spec.node_selector.as_ref()),
            node_affinity: spec
                .affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .map(node_affinity)
                .transpose()?,
        })
    };
    build().with_context(|| format!("daemonset {name}"))
}
