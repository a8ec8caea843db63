//! NodePools, with the instance types their plugin offers, into the engine.

use super::nodes;
use crate::crds::NodePool;
use anyhow::Context;
use std::sync::Arc;

/// `types`: the pool's catalog from [`instance_types::catalog`].
pub fn node_pool(
    np: &NodePool,
    types: Arc<[engine::InstanceType]>,
) -> anyhow::Result<engine::NodePool> {
    let name = np.metadata.name.clone().unwrap_or_default();
    let spec = &np.spec.template.spec;
    let build = || -> anyhow::Result<engine::NodePool> {
        let requirements = spec
            .requirements
            .iter()
            .map(|r| {
                Ok(engine::Requirement {
                    key: r.key.clone(),
                    operator: r
                        .operator
                        .parse()
                        .with_context(|| format!("requirement {}", r.key))?,
                    values: r.values.clone(),
                    min_values: r.min_values.and_then(|m| u32::try_from(m).ok()),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(engine::NodePool {
            name: name.clone(),
            weight: np.spec.weight.unwrap_or(0),
            labels: super::labels(np.spec.template.metadata.as_ref().map(|m| &m.labels)),
            taints: spec
                .taints
                .iter()
                .map(nodes::taint)
                .collect::<anyhow::Result<_>>()?,
            startup_taints: spec
                .startup_taints
                .iter()
                .map(nodes::taint)
                .collect::<anyhow::Result<_>>()?,
            requirements,
            limits: super::resource_list(np.spec.limits.as_ref()).context("limits")?,
            instance_types: types,
            replicas: np.spec.replicas.map(|r| u32::try_from(r).unwrap_or(0)),
        })
    };
    build().with_context(|| format!("nodepool {name}"))
}
