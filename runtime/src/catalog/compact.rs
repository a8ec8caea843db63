//! The compact catalog (`catalog.get-catalog`, contract 0.1.2) expanded into
//! the instance types `provider.get-instance-types` would have listed. Every
//! index is checked first: a plugin's bad index fails its call, never the
//! host, and the expansion itself then only copies.

use super::super::bindings::catalog::{Catalog, CatalogRequirement};
use super::super::bindings::wit;
use anyhow::ensure;

pub fn expand(catalog: &Catalog) -> anyhow::Result<Vec<wit::InstanceType>> {
    check_indices(catalog)?;
    let string = |i: u32| catalog.strings[i as usize].clone();
    let requirements: Vec<wit::Requirement> = catalog
        .requirements
        .iter()
        .map(|r| wit::Requirement {
            key: string(r.key),
            operator: r.operator,
            values: r.values.iter().map(|v| string(*v)).collect(),
            min_values: r.min_values,
        })
        .collect();
    let requirement_list = |list: &[u32]| -> Vec<wit::Requirement> {
        list.iter()
            .map(|i| requirements[*i as usize].clone())
            .collect()
    };
    let resources = |list: &[(u32, u32)]| -> wit::ResourceList {
        list.iter()
            .map(|(name, quantity)| (string(*name), string(*quantity)))
            .collect()
    };
    Ok(catalog
        .instance_types
        .iter()
        .map(|it| wit::InstanceType {
            name: string(it.name),
            requirements: requirement_list(&it.requirements),
            offerings: it
                .offerings
                .iter()
                .map(|o| wit::Offering {
                    zone: string(o.zone),
                    capacity_type: string(o.capacity_type),
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: requirement_list(&o.requirements),
                })
                .collect(),
            capacity: resources(&it.capacity),
            overhead: wit::Overhead {
                kube_reserved: resources(&it.kube_reserved),
                system_reserved: resources(&it.system_reserved),
                eviction_threshold: resources(&it.eviction_threshold),
            },
        })
        .collect())
}

/// Every string and requirement index is in range; the error names the first
/// that is not and where it is.
fn check_indices(catalog: &Catalog) -> anyhow::Result<()> {
    let strings = catalog.strings.len();
    let requirements = catalog.requirements.len();
    let string = |i: u32, what: &dyn Fn() -> String| {
        ensure!(
            (i as usize) < strings,
            "{}: string index {i} out of range ({strings} strings)",
            what()
        );
        Ok(())
    };
    let requirement = |i: u32, what: &dyn Fn() -> String| {
        ensure!(
            (i as usize) < requirements,
            "{}: requirement index {i} out of range ({requirements} requirements)",
            what()
        );
        Ok(())
    };
    for (n, r) in catalog.requirements.iter().enumerate() {
        let what = || format!("requirement {n}");
        requirement_strings(r).try_for_each(|i| string(i, &what))?;
    }
    for (n, it) in catalog.instance_types.iter().enumerate() {
        let what = || format!("instance type {n}");
        string(it.name, &what)?;
        it.requirements
            .iter()
            .try_for_each(|i| requirement(*i, &what))?;
        for o in &it.offerings {
            string(o.zone, &what)?;
            string(o.capacity_type, &what)?;
            o.requirements
                .iter()
                .try_for_each(|i| requirement(*i, &what))?;
        }
        [
            &it.capacity,
            &it.kube_reserved,
            &it.system_reserved,
            &it.eviction_threshold,
        ]
        .into_iter()
        .flatten()
        .try_for_each(|(name, quantity)| {
            string(*name, &what)?;
            string(*quantity, &what)
        })?;
    }
    Ok(())
}

fn requirement_strings(r: &CatalogRequirement) -> impl Iterator<Item = u32> + '_ {
    std::iter::once(r.key).chain(r.values.iter().copied())
}
