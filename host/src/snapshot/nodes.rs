//! Nodes (with the pods bound to them) into the engine.

use super::pods;
use crate::slim::Pod;
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Taint};

pub fn taint(t: &Taint) -> anyhow::Result<engine::Taint> {
    Ok(engine::Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: effect(&t.effect)?,
    })
}

pub fn effect(e: &str) -> anyhow::Result<engine::TaintEffect> {
    Ok(match e {
        "NoSchedule" => engine::TaintEffect::NoSchedule,
        "PreferNoSchedule" => engine::TaintEffect::PreferNoSchedule,
        "NoExecute" => engine::TaintEffect::NoExecute,
        other => bail!("unknown taint effect {other:?}"),
    })
}

/// A Node and the pods bound to it. `initialized` is Karpenter's notion (the
/// karpenter.sh/initialized label) for managed nodes; unmanaged Ready nodes
/// count as initialized.
pub fn node(node: &Node, bound: &[&Pod]) -> anyhow::Result<engine::Node> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let build = || -> anyhow::Result<engine::Node> {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.clone().unwrap_or_default();
        let node_pool = labels.get("karpenter.sh/nodepool").cloned();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let initialized = match &node_pool {
            Some(_) => labels
                .get("karpenter.sh/initialized")
                .is_some_and(|v| v == "true"),
            None => ready,
        };
        Ok(engine::Node {
            labels: super::labels(Some(&labels)),
            taints: spec
                .taints
                .iter()
                .flatten()
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            allocatable: super::resource_list(status.allocatable.as_ref())
                .context("allocatable")?,
            capacity: Some(super::resource_list(status.capacity.as_ref()).context("capacity")?),
            pods: bound
                .iter()
                .map(|p| pods::bound_pod(p))
                .collect::<anyhow::Result<_>>()?,
            initialized,
            node_pool,
            in_flight: false,
            name: name.clone(),
        })
    };
    build().with_context(|| format!("node {name}"))
}
