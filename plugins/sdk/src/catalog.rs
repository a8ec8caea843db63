//! The compact forms of the catalog: `catalog` (contract 0.1.2) and
//! `catalog-table` (0.1.4). Every SDK provider exports both. By default both
//! answer none, and the host asks `get_instance_types`: interning a catalog
//! built per call costs more than the strings it saves. A provider whose
//! catalog rarely changes builds its tables once with
//! [`crate::catalog_table::table`] and answers with a copy
//! ([`CompactCatalog::get_table`]), as kwok does; the host asks `get-table`
//! first.

use crate::bindings::exports::karpenter::provider::catalog::Guest as CatalogGuest;
pub use crate::bindings::exports::karpenter::provider::catalog::{
    Catalog, CatalogInstanceType, CatalogOffering, CatalogRequirement,
};
use crate::bindings::exports::karpenter::provider::catalog_table::Guest as TableGuest;
use crate::bindings::exports::karpenter::provider::catalog_table::InstanceTypeTable;
use crate::bindings::exports::karpenter::provider::provider::Guest;
use crate::bindings::karpenter::provider::types::{
    Error, InstanceType, NodeClass, NodePool, Requirement,
};
use std::collections::HashMap;

/// How a provider answers `catalog-table.get-table` and
/// `catalog.get-catalog`. `impl CompactCatalog for MyCloud {}` keeps the
/// defaults: none, so the host asks `get_instance_types`.
pub trait CompactCatalog: Guest {
    fn get_table(_pool: NodePool, _class: NodeClass) -> Result<Option<InstanceTypeTable>, Error> {
        Ok(None)
    }

    fn get_catalog(_pool: NodePool, _class: NodeClass) -> Result<Option<Catalog>, Error> {
        Ok(None)
    }
}

impl<T: CompactCatalog> CatalogGuest for T {
    fn get_catalog(pool: NodePool, class: NodeClass) -> Result<Option<Catalog>, Error> {
        <T as CompactCatalog>::get_catalog(pool, class)
    }
}

impl<T: CompactCatalog> TableGuest for T {
    fn get_table(pool: NodePool, class: NodeClass) -> Result<Option<InstanceTypeTable>, Error> {
        <T as CompactCatalog>::get_table(pool, class)
    }
}

/// The instance types with each distinct string and requirement once.
pub fn compact(types: &[InstanceType]) -> Catalog {
    let mut b = Builder::default();
    let instance_types = types
        .iter()
        .map(|it| CatalogInstanceType {
            name: b.string(&it.name),
            requirements: it.requirements.iter().map(|r| b.requirement(r)).collect(),
            offerings: it
                .offerings
                .iter()
                .map(|o| CatalogOffering {
                    zone: b.string(&o.zone),
                    capacity_type: b.string(&o.capacity_type),
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: o.requirements.iter().map(|r| b.requirement(r)).collect(),
                })
                .collect(),
            capacity: b.resources(&it.capacity),
            kube_reserved: b.resources(&it.overhead.kube_reserved),
            system_reserved: b.resources(&it.overhead.system_reserved),
            eviction_threshold: b.resources(&it.overhead.eviction_threshold),
        })
        .collect();
    Catalog {
        strings: b.strings.list,
        requirements: b.requirements,
        instance_types,
    }
}

/// A string of the catalog by index, as the host reads it.
pub fn string(catalog: &Catalog, index: u32) -> &str {
    catalog
        .strings
        .get(index as usize)
        .map_or("", String::as_str)
}

/// Each distinct string once, by index.
#[derive(Default)]
pub(crate) struct Strings {
    pub list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Strings {
    pub fn index(&mut self, s: &str) -> u32 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

#[derive(Default)]
struct Builder {
    strings: Strings,
    requirements: Vec<CatalogRequirement>,
    requirement_index: HashMap<(u32, u8, Vec<u32>, Option<u32>), u32>,
}

impl Builder {
    fn string(&mut self, s: &str) -> u32 {
        self.strings.index(s)
    }

    fn requirement(&mut self, r: &Requirement) -> u32 {
        let key = self.string(&r.key);
        let values: Vec<u32> = r.values.iter().map(|v| self.string(v)).collect();
        let id = (key, r.operator as u8, values, r.min_values);
        if let Some(i) = self.requirement_index.get(&id) {
            return *i;
        }
        let i = self.requirements.len() as u32;
        self.requirements.push(CatalogRequirement {
            key,
            operator: r.operator,
            values: id.2.clone(),
            min_values: r.min_values,
        });
        self.requirement_index.insert(id, i);
        i
    }

    fn resources(&mut self, list: &[(String, String)]) -> Vec<(u32, u32)> {
        list.iter()
            .map(|(name, quantity)| (self.string(name), self.string(quantity)))
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::bindings::karpenter::provider::types::{Offering, Overhead};
    use crate::resources::{req_in, resources};

    pub(crate) fn instance_type(name: &str) -> InstanceType {
        InstanceType {
            name: name.into(),
            requirements: vec![
                req_in("node.kubernetes.io/instance-type", &[name]),
                req_in("kubernetes.io/arch", &["amd64"]),
            ],
            offerings: vec![Offering {
                zone: "zone-a".into(),
                capacity_type: "spot".into(),
                price: 0.5,
                available: true,
                reservation_capacity: None,
                requirements: vec![],
            }],
            capacity: resources(&[("cpu", "4".into()), ("memory", "16Gi".into())]),
            overhead: Overhead {
                kube_reserved: resources(&[("cpu", "100m".into())]),
                system_reserved: vec![],
                eviction_threshold: vec![],
            },
        }
    }

    #[test]
    fn each_string_and_requirement_is_kept_once_and_found_by_index() {
        let catalog = compact(&[instance_type("a"), instance_type("b")]);
        let mut strings = catalog.strings.clone();
        strings.sort();
        strings.dedup();
        assert_eq!(strings.len(), catalog.strings.len());
        // The arch requirement is shared; the names are not.
        assert_eq!(catalog.requirements.len(), 3);
        let b = &catalog.instance_types[1];
        assert_eq!(string(&catalog, b.name), "b");
        assert_eq!(b.requirements[1], catalog.instance_types[0].requirements[1]);
        assert_eq!(string(&catalog, b.offerings[0].zone), "zone-a");
        let (cpu, four) = b.capacity[0];
        assert_eq!(
            (string(&catalog, cpu), string(&catalog, four)),
            ("cpu", "4")
        );
    }
}
