//! Instance types from a plugin into the engine. The plugin's answer is
//! consumed: its strings move into the engine's types, never copied.

use anyhow::Context;
use engine::{InstanceType, Offering, Overhead, Requirement, ResourceList};
use karpenter_runtime::wit;
use std::sync::Arc;

fn requirement(r: wit::Requirement) -> Requirement {
    Requirement {
        key: r.key,
        operator: r.operator.into(),
        values: r.values,
        min_values: r.min_values,
    }
}

fn resources(list: wit::ResourceList) -> anyhow::Result<ResourceList> {
    list.into_iter()
        .map(|(k, v)| {
            let quantity =
                engine::parse_resource(&k, &v).with_context(|| format!("resource {k}"))?;
            Ok((k, quantity))
        })
        .collect()
}

/// A plugin's catalog, converted once and shared by every snapshot built
/// from it.
pub fn catalog(types: Vec<wit::InstanceType>) -> anyhow::Result<Arc<[InstanceType]>> {
    types.into_iter().map(instance_type).collect()
}

fn instance_type(it: wit::InstanceType) -> anyhow::Result<InstanceType> {
    let name = it.name;
    let build = || -> anyhow::Result<InstanceType> {
        Ok(InstanceType {
            name: name.clone(),
            requirements: it.requirements.into_iter().map(requirement).collect(),
            offerings: it
                .offerings
                .into_iter()
                .map(|o| Offering {
                    zone: Some(o.zone),
                    capacity_type: o.capacity_type,
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: o.requirements.into_iter().map(requirement).collect(),
                    price_overlay: None,
                })
                .collect(),
            capacity: resources(it.capacity).context("capacity")?,
            overhead: Overhead {
                kube_reserved: resources(it.overhead.kube_reserved).context("kube-reserved")?,
                system_reserved: resources(it.overhead.system_reserved)
                    .context("system-reserved")?,
                eviction_threshold: resources(it.overhead.eviction_threshold)
                    .context("eviction-threshold")?,
            },
            capacity_overlays: Vec::new(),
        })
    };
    build().with_context(|| format!("instance type {name}"))
}
