//! Instance types from a plugin into the engine.

use anyhow::Context;
use engine::{InstanceType, Offering, Overhead, Requirement, ResourceList};
use karpenter_runtime::wit;
use std::sync::Arc;

pub fn requirement(r: &wit::Requirement) -> Requirement {
    Requirement {
        key: r.key.clone(),
        operator: r.operator.into(),
        values: r.values.clone(),
        min_values: r.min_values,
    }
}

pub fn resources(list: &[(String, String)]) -> anyhow::Result<ResourceList> {
    list.iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                engine::parse_resource(k, v).with_context(|| format!("resource {k}"))?,
            ))
        })
        .collect()
}

/// A plugin's catalog, converted once and shared by every snapshot built
/// from it.
pub fn catalog(types: &[wit::InstanceType]) -> anyhow::Result<Arc<[InstanceType]>> {
    types.iter().map(instance_type).collect()
}

pub fn instance_type(it: &wit::InstanceType) -> anyhow::Result<InstanceType> {
    let build = || -> anyhow::Result<InstanceType> {
        Ok(InstanceType {
            name: it.name.clone(),
            requirements: it.requirements.iter().map(requirement).collect(),
            offerings: it
                .offerings
                .iter()
                .map(|o| Offering {
                    zone: Some(o.zone.clone()),
                    capacity_type: o.capacity_type.clone(),
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: o.requirements.iter().map(requirement).collect(),
                })
                .collect(),
            capacity: resources(&it.capacity).context("capacity")?,
            overhead: Overhead {
                kube_reserved: resources(&it.overhead.kube_reserved).context("kube-reserved")?,
                system_reserved: resources(&it.overhead.system_reserved)
                    .context("system-reserved")?,
                eviction_threshold: resources(&it.overhead.eviction_threshold)
                    .context("eviction-threshold")?,
            },
        })
    };
    build().with_context(|| format!("instance type {}", it.name))
}
