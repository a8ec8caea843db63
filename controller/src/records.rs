//! karpenter.sh objects and Kubernetes taints as the contract's records, for
//! the plugin runtime's calls.

use crate::crds::nodepool::NodeSelectorRequirementWithMinValues;
use crate::crds::{NodeClaim, NodePool};
use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Taint;
use karpenter_runtime::wit;

pub fn requirement(r: &NodeSelectorRequirementWithMinValues) -> anyhow::Result<wit::Requirement> {
    Ok(wit::Requirement {
        key: r.key.clone(),
        operator: r
            .operator
            .parse::<vocabulary::Operator>()
            .with_context(|| format!("requirement {}", r.key))?
            .into(),
        values: r.values.clone(),
        min_values: r.min_values.and_then(|m| u32::try_from(m).ok()),
    })
}

pub fn taint(t: &Taint) -> anyhow::Result<wit::Taint> {
    let effect = match t.effect.as_str() {
        "NoSchedule" => wit::TaintEffect::NoSchedule,
        "PreferNoSchedule" => wit::TaintEffect::PreferNoSchedule,
        "NoExecute" => wit::TaintEffect::NoExecute,
        other => bail!("taint {}: unknown effect {other:?}", t.key),
    };
    Ok(wit::Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect,
    })
}

pub fn node_pool(np: &NodePool) -> anyhow::Result<wit::NodePool> {
    let name = np.metadata.name.clone().unwrap_or_default();
    let spec = &np.spec.template.spec;
    let meta = np.spec.template.metadata.clone().unwrap_or_default();
    let pairs = |m: &std::collections::BTreeMap<String, String>| {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let build = || -> anyhow::Result<wit::NodePool> {
        Ok(wit::NodePool {
            name: name.clone(),
            labels: pairs(&meta.labels),
            annotations: pairs(&meta.annotations),
            taints: spec
                .taints
                .iter()
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            startup_taints: spec
                .startup_taints
                .iter()
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            requirements: spec
                .requirements
                .iter()
                .map(requirement)
                .collect::<anyhow::Result<_>>()?,
            node_class_ref: wit::NodeClassRef {
                group: spec.node_class_ref.group.clone(),
                kind: spec.node_class_ref.kind.clone(),
                name: spec.node_class_ref.name.clone(),
            },
        })
    };
    build().with_context(|| format!("nodepool {name}"))
}

/// A NodeClaim as its plugin sees it; `kubelet_version` comes from its Node
/// once registered.
pub fn node_claim(
    nc: &NodeClaim,
    kubelet_version: Option<String>,
) -> anyhow::Result<wit::NodeClaim> {
    let name = nc.metadata.name.clone().unwrap_or_default();
    let pairs = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let build = || -> anyhow::Result<wit::NodeClaim> {
        let spec = &nc.spec;
        let status = nc.status.as_ref();
        Ok(wit::NodeClaim {
            name: name.clone(),
            node_pool: nc.node_pool().unwrap_or_default().to_string(),
            labels: pairs(nc.metadata.labels.as_ref()),
            annotations: pairs(nc.metadata.annotations.as_ref()),
            taints: spec
                .taints
                .iter()
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            startup_taints: spec
                .startup_taints
                .iter()
                .map(taint)
                .collect::<anyhow::Result<_>>()?,
            requirements: spec
                .requirements
                .iter()
                .map(requirement)
                .collect::<anyhow::Result<_>>()?,
            resource_requests: spec
                .resources
                .iter()
                .flat_map(|r| &r.requests)
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect(),
            node_class_ref: wit::NodeClassRef {
                group: spec.node_class_ref.group.clone(),
                kind: spec.node_class_ref.kind.clone(),
                name: spec.node_class_ref.name.clone(),
            },
            provider_id: status.and_then(|s| s.provider_id.clone()),
            image_id: status.and_then(|s| s.image_id.clone()),
            kubelet_version,
        })
    };
    build().with_context(|| format!("nodeclaim {name}"))
}

/// A NodeClass object of any kind, as JSON.
pub fn node_class(object: &serde_json::Value) -> anyhow::Result<wit::NodeClass> {
    let meta = &object["metadata"];
    let name = meta["name"]
        .as_str()
        .context("NodeClass has no metadata.name")?
        .to_string();
    Ok(wit::NodeClass {
        name,
        generation: meta["generation"].as_u64().unwrap_or(1),
        json: serde_json::to_string(object)?,
    })
}

/// A NodePool with nothing but its NodeClass reference: what a plugin sees
/// when called outside any NodePool (CLI calls, benchmarks, tests).
pub fn bare_node_pool(name: &str, node_class_ref: wit::NodeClassRef) -> wit::NodePool {
    wit::NodePool {
        name: name.to_string(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        node_class_ref,
    }
}

/// `key In [values]`.
pub fn requirement_in(key: &str, values: &[&str]) -> wit::Requirement {
    wit::Requirement {
        key: key.to_string(),
        operator: wit::Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}
