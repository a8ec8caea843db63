//! Nodes (with the pods bound to them, and their NodeClaims) into the engine.

use super::pods;
use crate::crds::NodeClaim;
use crate::slim::{Node, Pod};
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Taint;
use vocabulary::labels;

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

/// A Node and the pods bound to it, as Karpenter's cluster state sees it.
/// A managed node (one with a NodeClaim, or the nodepool label) counts as
/// initialized only with the karpenter.sh/initialized label; unmanaged Ready
/// nodes count as initialized. Until its kubelet has caught up, a managed
/// node borrows from its NodeClaim: labels and taints until it is
/// registered, resources the Node does not report yet until it is
/// initialized; its startup taints do not count until then either. Without
/// this, a starting node whose labels are still being synced would turn
/// away the pods it was launched for.
pub fn node(
    node: &Node,
    claim: Option<&NodeClaim>,
    bound: &[&Pod],
    converter: &mut pods::Pods,
) -> anyhow::Result<engine::Node> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let mut build = || -> anyhow::Result<engine::Node> {
        let label = |k: &str| node.label(k);
        let status = node.status.as_ref();
        let node_pool = label(labels::NODE_POOL)
            .or_else(|| claim.and_then(|c| c.node_pool()))
            .map(str::to_string);
        let initialized = match &node_pool {
            Some(_) => label(labels::INITIALIZED) == Some("true"),
            None => node.is_ready(),
        };
        let registered = label(labels::REGISTERED) == Some("true");
        let mut engine_labels: engine::Labels = node
            .labels()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut node_taints = node.taints();
        let mut allocatable = super::resource_list(status.and_then(|s| s.allocatable.as_ref()))
            .context("allocatable")?;
        let mut capacity =
            super::resource_list(status.and_then(|s| s.capacity.as_ref())).context("capacity")?;
        let mut startup_taints: &[Taint] = &[];
        if let Some(c) = claim {
            if !registered {
                for (k, v) in claim_labels(c) {
                    engine_labels.insert(k, v);
                }
                node_taints = &c.spec.taints;
            }
            if !initialized {
                startup_taints = &c.spec.startup_taints;
                if let Some(s) = &c.status {
                    fill_missing(
                        &mut allocatable,
                        &super::resource_list(Some(&s.allocatable))?,
                    );
                    fill_missing(&mut capacity, &super::resource_list(Some(&s.capacity))?);
                }
            }
        }
        Ok(engine::Node {
            labels: engine_labels,
            taints: node_taints
                .iter()
                .filter(|t| {
                    !startup_taints
                        .iter()
                        .any(|s| s.key == t.key && s.effect == t.effect)
                })
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            allocatable,
            capacity: Some(capacity),
            pods: bound
                .iter()
                .map(|p| converter.bound(p))
                .collect::<anyhow::Result<_>>()?,
            initialized,
            node_pool,
            in_flight: false,
            awaiting_launch: false,
            name: name.clone(),
        })
    };
    build().with_context(|| format!("node {name}"))
}

/// The labels a NodeClaim promises its node: its own, and every requirement
/// that allows one value.
pub fn claim_labels(c: &NodeClaim) -> engine::Labels {
    let mut out = super::labels(c.metadata.labels.as_ref());
    for r in &c.spec.requirements {
        if r.operator == "In" && r.values.len() == 1 {
            out.insert(r.key.clone(), r.values[0].clone());
        }
    }
    out
}

/// Resources `have` lacks or reports as zero, taken from `promised`.
fn fill_missing(have: &mut engine::ResourceList, promised: &engine::ResourceList) {
    for (k, v) in promised.iter() {
        let e = have.entry_or_insert_with(k, || 0);
        if *e == 0 {
            *e = *v;
        }
    }
}
