//! The catalog as flat tables (contract 0.1.4), built once from the
//! instance types a provider lists: each distinct string and requirement
//! once, and no list inside a list, so a call copies seven flat lists
//! however many types there are.

pub use crate::bindings::exports::karpenter::provider::catalog_table::{
    InstanceTypeTable, Span, TableInstanceType, TableOffering, TableQuantity, TableRequirement,
};
use crate::bindings::karpenter::provider::types::{InstanceType, Requirement};
use crate::catalog::Strings;
use std::collections::HashMap;

/// The instance types as tables.
pub fn table(types: &[InstanceType]) -> InstanceTypeTable {
    let mut b = Builder::default();
    let instance_types = types
        .iter()
        .map(|it| {
            let name = b.strings.index(&it.name);
            let requirements = b.requirement_list(&it.requirements);
            let start = b.offerings.len();
            for o in &it.offerings {
                let offering = TableOffering {
                    zone: b.strings.index(&o.zone),
                    capacity_type: b.strings.index(&o.capacity_type),
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: b.requirement_list(&o.requirements),
                };
                b.offerings.push(offering);
            }
            TableInstanceType {
                name,
                requirements,
                offerings: span(start, b.offerings.len()),
                capacity: b.quantities(&it.capacity),
                kube_reserved: b.quantities(&it.overhead.kube_reserved),
                system_reserved: b.quantities(&it.overhead.system_reserved),
                eviction_threshold: b.quantities(&it.overhead.eviction_threshold),
            }
        })
        .collect();
    InstanceTypeTable {
        strings: b.strings.list,
        values: b.values,
        requirements: b.requirements,
        requirement_refs: b.requirement_refs,
        offerings: b.offerings,
        quantities: b.quantities,
        instance_types,
    }
}

/// A string of the table by index, as the host reads it.
pub fn string(table: &InstanceTypeTable, index: u32) -> &str {
    table.strings.get(index as usize).map_or("", String::as_str)
}

/// An instance type's offerings, as the host reads its span.
pub fn offerings<'a>(table: &'a InstanceTypeTable, it: &TableInstanceType) -> &'a [TableOffering] {
    let start = it.offerings.start as usize;
    table
        .offerings
        .get(start..start + it.offerings.len as usize)
        .unwrap_or_default()
}

fn span(start: usize, end: usize) -> Span {
    Span {
        start: start as u32,
        len: (end - start) as u32,
    }
}

#[derive(Default)]
struct Builder {
    strings: Strings,
    values: Vec<u32>,
    requirements: Vec<TableRequirement>,
    requirement_index: HashMap<(u32, u8, Vec<u32>, Option<u32>), u32>,
    requirement_refs: Vec<u32>,
    offerings: Vec<TableOffering>,
    quantities: Vec<TableQuantity>,
}

impl Builder {
    fn requirement(&mut self, r: &Requirement) -> u32 {
        let key = self.strings.index(&r.key);
        let values: Vec<u32> = r.values.iter().map(|v| self.strings.index(v)).collect();
        let id = (key, r.operator as u8, values, r.min_values);
        if let Some(i) = self.requirement_index.get(&id) {
            return *i;
        }
        let start = self.values.len();
        self.values.extend_from_slice(&id.2);
        let i = self.requirements.len() as u32;
        self.requirements.push(TableRequirement {
            key,
            operator: r.operator,
            values: span(start, self.values.len()),
            min_values: r.min_values,
        });
        self.requirement_index.insert(id, i);
        i
    }

    fn requirement_list(&mut self, list: &[Requirement]) -> Span {
        let refs: Vec<u32> = list.iter().map(|r| self.requirement(r)).collect();
        let start = self.requirement_refs.len();
        self.requirement_refs.extend(refs);
        span(start, self.requirement_refs.len())
    }

    fn quantities(&mut self, list: &[(String, String)]) -> Span {
        let start = self.quantities.len();
        for (name, quantity) in list {
            let q = TableQuantity {
                name: self.strings.index(name),
                quantity: self.strings.index(quantity),
            };
            self.quantities.push(q);
        }
        span(start, self.quantities.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::instance_type;

    #[test]
    fn every_run_is_a_span_and_each_string_and_requirement_is_kept_once() {
        let t = table(&[instance_type("a"), instance_type("b")]);
        let mut strings = t.strings.clone();
        strings.sort();
        strings.dedup();
        assert_eq!(strings.len(), t.strings.len());
        // The arch requirement is shared; the names are not.
        assert_eq!(t.requirements.len(), 3);
        let b = &t.instance_types[1];
        assert_eq!(string(&t, b.name), "b");
        let refs = |s: Span| &t.requirement_refs[s.start as usize..(s.start + s.len) as usize];
        assert_eq!(
            refs(b.requirements)[1],
            refs(t.instance_types[0].requirements)[1]
        );
        let arch = &t.requirements[refs(b.requirements)[1] as usize];
        assert_eq!(string(&t, arch.key), "kubernetes.io/arch");
        assert_eq!(string(&t, t.values[arch.values.start as usize]), "amd64");
        assert_eq!(string(&t, offerings(&t, b)[0].zone), "zone-a");
        let cpu = t.quantities[b.capacity.start as usize];
        assert_eq!(
            (string(&t, cpu.name), string(&t, cpu.quantity)),
            ("cpu", "4")
        );
        assert_eq!(b.kube_reserved.len, 1);
        assert_eq!(b.system_reserved.len, 0);
    }
}
