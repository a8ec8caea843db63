//! The compact catalog (`catalog.get-catalog`, contract 0.1.2) expanded into
//! the instance types `provider.get-instance-types` would have listed. Every
//! index is checked: a plugin's bad index fails its call, never the host.

use super::bindings::catalog::{Catalog, CatalogRequirement};
use super::bindings::wit;
use anyhow::{Context, anyhow};

pub fn expand(catalog: &Catalog) -> anyhow::Result<Vec<wit::InstanceType>> {
    let string = |i: u32| -> anyhow::Result<String> {
        catalog.strings.get(i as usize).cloned().ok_or_else(|| {
            anyhow!(
                "string index {i} out of range ({} strings)",
                catalog.strings.len()
            )
        })
    };
    let requirements = catalog
        .requirements
        .iter()
        .enumerate()
        .map(|(i, r)| requirement(r, &string).with_context(|| format!("requirement {i}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let requirement = |i: &u32| -> anyhow::Result<wit::Requirement> {
        requirements.get(*i as usize).cloned().ok_or_else(|| {
            anyhow!(
                "requirement index {i} out of range ({} requirements)",
                requirements.len()
            )
        })
    };
    let resources = |list: &[(u32, u32)]| -> anyhow::Result<wit::ResourceList> {
        list.iter()
            .map(|(name, quantity)| Ok((string(*name)?, string(*quantity)?)))
            .collect()
    };
    catalog
        .instance_types
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let expanded = || -> anyhow::Result<wit::InstanceType> {
                Ok(wit::InstanceType {
                    name: string(it.name)?,
                    requirements: it
                        .requirements
                        .iter()
                        .map(requirement)
                        .collect::<Result<_, _>>()?,
                    offerings: it
                        .offerings
                        .iter()
                        .map(|o| {
                            Ok(wit::Offering {
                                zone: string(o.zone)?,
                                capacity_type: string(o.capacity_type)?,
                                price: o.price,
                                available: o.available,
                                reservation_capacity: o.reservation_capacity,
                                requirements: o
                                    .requirements
                                    .iter()
                                    .map(requirement)
                                    .collect::<Result<_, _>>()?,
                            })
                        })
                        .collect::<anyhow::Result<_>>()?,
                    capacity: resources(&it.capacity).context("capacity")?,
                    overhead: wit::Overhead {
                        kube_reserved: resources(&it.kube_reserved).context("kube-reserved")?,
                        system_reserved: resources(&it.system_reserved)
                            .context("system-reserved")?,
                        eviction_threshold: resources(&it.eviction_threshold)
                            .context("eviction-threshold")?,
                    },
                })
            };
            expanded().with_context(|| format!("instance type {i}"))
        })
        .collect()
}

fn requirement(
    r: &CatalogRequirement,
    string: &impl Fn(u32) -> anyhow::Result<String>,
) -> anyhow::Result<wit::Requirement> {
    Ok(wit::Requirement {
        key: string(r.key)?,
        operator: r.operator,
        values: r
            .values
            .iter()
            .map(|v| string(*v))
            .collect::<Result<_, _>>()?,
        min_values: r.min_values,
    })
}
