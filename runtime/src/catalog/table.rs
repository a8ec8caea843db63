//! The catalog as flat tables (`catalog-table.get-table`, contract 0.1.4),
//! kept as it crossed. Every index and span is checked once, when the table
//! arrives: a plugin's bad index fails its call, never the host, and every
//! read after that is in range.

use super::super::bindings::catalog_table::{
    InstanceTypeTable, Span, TableInstanceType, TableOffering, TableQuantity, TableRequirement,
};
use super::super::bindings::wit;
use super::super::validate::{OfferingView, RequirementView, Resources, TypeView};
use anyhow::ensure;

/// A plugin's tables, every index and span in range.
#[derive(Debug)]
pub struct Table(InstanceTypeTable);

/// One instance type of a checked table.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    table: &'a InstanceTypeTable,
    row: &'a TableInstanceType,
}

impl Table {
    pub fn check(table: InstanceTypeTable) -> anyhow::Result<Self> {
        check(&table)?;
        Ok(Table(table))
    }

    pub fn len(&self) -> usize {
        self.0.instance_types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.instance_types.is_empty()
    }

    pub fn rows(&self) -> impl ExactSizeIterator<Item = Row<'_>> {
        self.0.instance_types.iter().map(|row| Row {
            table: &self.0,
            row,
        })
    }

    /// The instance types as `get-instance-types` lists them.
    pub fn expand(&self) -> Vec<wit::InstanceType> {
        self.rows().map(|r| r.expand()).collect()
    }
}

impl<'a> Row<'a> {
    pub fn name_index(&self) -> u32 {
        self.row.name
    }

    pub fn requirements(&self) -> impl Iterator<Item = &'a TableRequirement> + use<'a> {
        self.refs(self.row.requirements)
    }

    pub fn offerings(&self) -> &'a [TableOffering] {
        slice(&self.table.offerings, self.row.offerings)
    }

    /// An offering's requirements.
    pub fn offering_requirements(
        &self,
        o: &TableOffering,
    ) -> impl Iterator<Item = &'a TableRequirement> + use<'a> {
        self.refs(o.requirements)
    }

    pub fn quantities(&self, which: Resources) -> &'a [TableQuantity] {
        let span = match which {
            Resources::Capacity => self.row.capacity,
            Resources::KubeReserved => self.row.kube_reserved,
            Resources::SystemReserved => self.row.system_reserved,
            Resources::EvictionThreshold => self.row.eviction_threshold,
        };
        slice(&self.table.quantities, span)
    }

    /// A requirement's values, as indices into the strings.
    pub fn values(&self, r: &TableRequirement) -> &'a [u32] {
        slice(&self.table.values, r.values)
    }

    /// A string by index; every index of a checked table is in range.
    pub fn string(&self, index: u32) -> &'a str {
        &self.table.strings[index as usize]
    }

    fn refs(&self, span: Span) -> impl Iterator<Item = &'a TableRequirement> + use<'a> {
        let requirements = &self.table.requirements;
        slice(&self.table.requirement_refs, span)
            .iter()
            .map(move |i| &requirements[*i as usize])
    }

    fn requirement(&self, r: &TableRequirement) -> wit::Requirement {
        wit::Requirement {
            key: self.string(r.key).to_owned(),
            operator: r.operator,
            values: self
                .values(r)
                .iter()
                .map(|v| self.string(*v).to_owned())
                .collect(),
            min_values: r.min_values,
        }
    }

    fn resources(&self, which: Resources) -> wit::ResourceList {
        self.quantities(which)
            .iter()
            .map(|q| {
                (
                    self.string(q.name).to_owned(),
                    self.string(q.quantity).to_owned(),
                )
            })
            .collect()
    }

    fn expand(&self) -> wit::InstanceType {
        wit::InstanceType {
            name: self.string(self.row.name).to_owned(),
            requirements: self.requirements().map(|r| self.requirement(r)).collect(),
            offerings: self
                .offerings()
                .iter()
                .map(|o| wit::Offering {
                    zone: self.string(o.zone).to_owned(),
                    capacity_type: self.string(o.capacity_type).to_owned(),
                    price: o.price,
                    available: o.available,
                    reservation_capacity: o.reservation_capacity,
                    requirements: self
                        .offering_requirements(o)
                        .map(|r| self.requirement(r))
                        .collect(),
                })
                .collect(),
            capacity: self.resources(Resources::Capacity),
            overhead: wit::Overhead {
                kube_reserved: self.resources(Resources::KubeReserved),
                system_reserved: self.resources(Resources::SystemReserved),
                eviction_threshold: self.resources(Resources::EvictionThreshold),
            },
        }
    }
}

impl TypeView for Row<'_> {
    fn name(&self) -> &str {
        self.string(self.row.name)
    }

    fn requirement_views(&self) -> impl Iterator<Item = RequirementView<'_>> {
        self.requirements().map(|r| {
            let values = self.values(r);
            RequirementView {
                key: self.string(r.key),
                operator: r.operator,
                values: values.len(),
                first: values.first().map(|v| self.string(*v)),
            }
        })
    }

    fn offering_views(&self) -> impl Iterator<Item = OfferingView<'_>> {
        self.offerings().iter().map(|o| OfferingView {
            zone: self.string(o.zone),
            capacity_type: self.string(o.capacity_type),
            price: o.price,
        })
    }

    fn resource_views(&self, which: Resources) -> impl Iterator<Item = (&str, &str)> {
        self.quantities(which)
            .iter()
            .map(|q| (self.string(q.name), self.string(q.quantity)))
    }
}

/// A checked span of a list.
fn slice<T>(list: &[T], span: Span) -> &[T] {
    let start = span.start as usize;
    &list[start..start + span.len as usize]
}

/// Every index and span in range; the error names the first that is not.
fn check(t: &InstanceTypeTable) -> anyhow::Result<()> {
    let index = |i: u32, len: usize, of: &str, at: &dyn Fn() -> String| {
        ensure!(
            (i as usize) < len,
            "{}: {of} index {i} out of range ({len} {of}s)",
            at()
        );
        Ok(())
    };
    let span = |s: Span, len: usize, of: &str, at: &dyn Fn() -> String| {
        let end = u64::from(s.start) + u64::from(s.len);
        ensure!(
            end <= len as u64,
            "{}: span {}+{} of {of} out of range ({len} entries)",
            at(),
            s.start,
            s.len
        );
        Ok(())
    };
    let strings = t.strings.len();
    for (n, v) in t.values.iter().enumerate() {
        index(*v, strings, "string", &|| format!("value {n}"))?;
    }
    for (n, r) in t.requirements.iter().enumerate() {
        let at = || format!("requirement {n}");
        index(r.key, strings, "string", &at)?;
        span(r.values, t.values.len(), "values", &at)?;
    }
    for (n, r) in t.requirement_refs.iter().enumerate() {
        index(*r, t.requirements.len(), "requirement", &|| {
            format!("requirement-ref {n}")
        })?;
    }
    for (n, o) in t.offerings.iter().enumerate() {
        let at = || format!("offering {n}");
        index(o.zone, strings, "string", &at)?;
        index(o.capacity_type, strings, "string", &at)?;
        span(
            o.requirements,
            t.requirement_refs.len(),
            "requirement-refs",
            &at,
        )?;
    }
    for (n, q) in t.quantities.iter().enumerate() {
        let at = || format!("quantity {n}");
        index(q.name, strings, "string", &at)?;
        index(q.quantity, strings, "string", &at)?;
    }
    for (n, it) in t.instance_types.iter().enumerate() {
        let at = || format!("instance type {n}");
        index(it.name, strings, "string", &at)?;
        span(
            it.requirements,
            t.requirement_refs.len(),
            "requirement-refs",
            &at,
        )?;
        span(it.offerings, t.offerings.len(), "offerings", &at)?;
        for s in [
            it.capacity,
            it.kube_reserved,
            it.system_reserved,
            it.eviction_threshold,
        ] {
            span(s, t.quantities.len(), "quantities", &at)?;
        }
    }
    Ok(())
}
