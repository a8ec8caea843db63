//! Instance types from a plugin into the engine. A listed answer is
//! consumed: its strings move into the engine's types, never copied. A
//! table (contract 0.1.4) is read in place: each distinct quantity is parsed
//! once, however many types share it.

use anyhow::Context;
use engine::{InstanceType, Offering, Overhead, Requirement, ResourceList};
use karpenter_runtime::bindings::catalog_table::TableRequirement;
use karpenter_runtime::catalog::{Row, Table};
use karpenter_runtime::validate::Resources;
use karpenter_runtime::{InstanceTypes, wit};
use std::collections::HashMap;
use std::sync::Arc;

/// A plugin's catalog, converted once and shared by every snapshot built
/// from it.
pub fn catalog(types: InstanceTypes) -> anyhow::Result<Arc<[InstanceType]>> {
    match types {
        InstanceTypes::Listed(types) => types.into_iter().map(instance_type).collect(),
        InstanceTypes::Table(table) => from_table(&table),
    }
}

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

/// Quantities parsed, by (resource name, quantity) string index: a catalog
/// has a few dozen distinct ones among thousands of entries.
type Parsed = HashMap<(u32, u32), i64>;

fn from_table(table: &Table) -> anyhow::Result<Arc<[InstanceType]>> {
    let mut parsed = Parsed::new();
    table
        .rows()
        .map(|row| {
            table_row(row, &mut parsed)
                .with_context(|| format!("instance type {}", row.string(row.name_index())))
        })
        .collect()
}

fn table_row(row: Row<'_>, parsed: &mut Parsed) -> anyhow::Result<InstanceType> {
    let requirement = |r: &TableRequirement| Requirement {
        key: row.string(r.key).to_owned(),
        operator: r.operator.into(),
        values: row
            .values(r)
            .iter()
            .map(|v| row.string(*v).to_owned())
            .collect(),
        min_values: r.min_values,
    };
    let mut resources = |which: Resources| -> anyhow::Result<ResourceList> {
        row.quantities(which)
            .iter()
            .map(|q| {
                let name = row.string(q.name);
                let amount = match parsed.get(&(q.name, q.quantity)) {
                    Some(amount) => *amount,
                    None => {
                        let amount = engine::parse_resource(name, row.string(q.quantity))
                            .with_context(|| format!("{}: resource {name}", which.name()))?;
                        parsed.insert((q.name, q.quantity), amount);
                        amount
                    }
                };
                Ok((name.to_owned(), amount))
            })
            .collect()
    };
    Ok(InstanceType {
        name: row.string(row.name_index()).to_owned(),
        requirements: row.requirements().map(requirement).collect(),
        offerings: row
            .offerings()
            .iter()
            .map(|o| Offering {
                zone: Some(row.string(o.zone).to_owned()),
                capacity_type: row.string(o.capacity_type).to_owned(),
                price: o.price,
                available: o.available,
                reservation_capacity: o.reservation_capacity,
                requirements: row.offering_requirements(o).map(requirement).collect(),
                price_overlay: None,
            })
            .collect(),
        capacity: resources(Resources::Capacity)?,
        overhead: Overhead {
            kube_reserved: resources(Resources::KubeReserved)?,
            system_reserved: resources(Resources::SystemReserved)?,
            eviction_threshold: resources(Resources::EvictionThreshold)?,
        },
        capacity_overlays: Vec::new(),
    })
}
