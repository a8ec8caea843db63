//! Checks of what plugins return: the host never acts on garbage. A result
//! that fails here fails the call with a message naming what is wrong.

use super::bindings::wit;
use anyhow::{Context, bail, ensure};
use engine::quantity::parse_resource;
use std::collections::BTreeSet;

/// Labels every instance type must define (Karpenter's well-known labels).
pub use vocabulary::labels::INSTANCE_TYPE_MUST_DEFINE as WELL_KNOWN_LABELS;

/// Guards the host against a plugin returning absurd amounts of data.
const MAX_INSTANCE_TYPES: usize = 20_000;

pub fn metadata(m: &wit::ProviderMetadata) -> anyhow::Result<()> {
    ensure!(
        is_dns_label(&m.name),
        "provider name {:?} is not a lower-case DNS label",
        m.name
    );
    ensure!(!m.provider_id_schemes.is_empty(), "no providerID schemes");
    ensure!(!m.node_classes.is_empty(), "serves no NodeClass kinds");
    for k in &m.node_classes {
        ensure!(
            !k.group.is_empty() && !k.version.is_empty() && !k.kind.is_empty(),
            "NodeClass kind incomplete: {k:?}"
        );
        ensure!(
            k.plural == k.plural.to_ascii_lowercase() && !k.plural.is_empty(),
            "plural {:?} must be lower case",
            k.plural
        );
        let schema: serde_json::Value = serde_json::from_str(&k.schema)
            .with_context(|| format!("{} schema is not JSON", k.kind))?;
        ensure!(
            schema.get("type").and_then(|t| t.as_str()) == Some("object"),
            "{} schema must be of type object",
            k.kind
        );
    }
    Ok(())
}

pub fn node_class_status(s: &wit::NodeClassStatus) -> anyhow::Result<()> {
    ensure!(
        s.conditions.iter().any(|c| c.type_ == "Ready"),
        "status has no Ready condition"
    );
    let resolved: serde_json::Value =
        serde_json::from_str(&s.resolved).context("resolved is not JSON")?;
    ensure!(resolved.is_object(), "resolved must be a JSON object");
    Ok(())
}

pub fn instance_types<T: TypeView>(types: impl ExactSizeIterator<Item = T>) -> anyhow::Result<()> {
    ensure!(
        types.len() <= MAX_INSTANCE_TYPES,
        "{} instance types (at most {MAX_INSTANCE_TYPES})",
        types.len()
    );
    let types: Vec<T> = types.collect();
    let mut names = BTreeSet::new();
    for it in &types {
        instance_type(it).with_context(|| format!("instance type {:?}", it.name()))?;
        ensure!(
            names.insert(it.name()),
            "instance type {:?} appears twice",
            it.name()
        );
    }
    Ok(())
}

/// What the checks read of an instance type, in whichever form the plugin
/// gave it (listed, or a row of its tables).
pub trait TypeView {
    fn name(&self) -> &str;
    fn requirement_views(&self) -> impl Iterator<Item = RequirementView<'_>>;
    fn offering_views(&self) -> impl Iterator<Item = OfferingView<'_>>;
    fn resource_views(&self, which: Resources) -> impl Iterator<Item = (&str, &str)>;
}

impl<T: TypeView> TypeView for &T {
    fn name(&self) -> &str {
        (*self).name()
    }

    fn requirement_views(&self) -> impl Iterator<Item = RequirementView<'_>> {
        (*self).requirement_views()
    }

    fn offering_views(&self) -> impl Iterator<Item = OfferingView<'_>> {
        (*self).offering_views()
    }

    fn resource_views(&self, which: Resources) -> impl Iterator<Item = (&str, &str)> {
        (*self).resource_views(which)
    }
}

pub struct RequirementView<'a> {
    pub key: &'a str,
    pub operator: wit::Operator,
    pub values: usize,
    pub first: Option<&'a str>,
}

pub struct OfferingView<'a> {
    pub zone: &'a str,
    pub capacity_type: &'a str,
    pub price: f64,
}

/// An instance type's resource lists.
#[derive(Clone, Copy, Debug)]
pub enum Resources {
    Capacity,
    KubeReserved,
    SystemReserved,
    EvictionThreshold,
}

impl Resources {
    const ALL: [Resources; 4] = [
        Resources::Capacity,
        Resources::KubeReserved,
        Resources::SystemReserved,
        Resources::EvictionThreshold,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Resources::Capacity => "capacity",
            Resources::KubeReserved => "kube-reserved",
            Resources::SystemReserved => "system-reserved",
            Resources::EvictionThreshold => "eviction-threshold",
        }
    }
}

impl TypeView for wit::InstanceType {
    fn name(&self) -> &str {
        &self.name
    }

    fn requirement_views(&self) -> impl Iterator<Item = RequirementView<'_>> {
        self.requirements.iter().map(|r| RequirementView {
            key: &r.key,
            operator: r.operator,
            values: r.values.len(),
            first: r.values.first().map(String::as_str),
        })
    }

    fn offering_views(&self) -> impl Iterator<Item = OfferingView<'_>> {
        self.offerings.iter().map(|o| OfferingView {
            zone: &o.zone,
            capacity_type: &o.capacity_type,
            price: o.price,
        })
    }

    fn resource_views(&self, which: Resources) -> impl Iterator<Item = (&str, &str)> {
        let list = match which {
            Resources::Capacity => &self.capacity,
            Resources::KubeReserved => &self.overhead.kube_reserved,
            Resources::SystemReserved => &self.overhead.system_reserved,
            Resources::EvictionThreshold => &self.overhead.eviction_threshold,
        };
        pairs(list)
    }
}

fn pairs(list: &wit::ResourceList) -> impl Iterator<Item = (&str, &str)> {
    list.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

fn instance_type(it: &impl TypeView) -> anyhow::Result<()> {
    ensure!(!it.name().is_empty(), "empty name");
    well_known_labels(it)?;
    requirements(it)?;
    offerings(it)?;
    prices(it)?;
    allocatable(it)
}

/// Every well-known label is defined by a requirement.
pub fn well_known_labels(it: &impl TypeView) -> anyhow::Result<()> {
    for label in WELL_KNOWN_LABELS {
        ensure!(
            it.requirement_views().any(|r| r.key == label),
            "does not define the well-known label {label}"
        );
    }
    Ok(())
}

/// Operators have the values they need.
pub fn requirements(it: &impl TypeView) -> anyhow::Result<()> {
    for r in it.requirement_views() {
        use wit::Operator::*;
        match r.operator {
            In => ensure!(r.values > 0, "requirement {} In has no values", r.key),
            Gt | Lt | Gte | Lte => ensure!(
                r.values == 1 && r.first.is_some_and(|v| v.parse::<i64>().is_ok()),
                "requirement {} {:?} needs one integer value",
                r.key,
                r.operator
            ),
            NotIn | Exists | DoesNotExist => {}
        }
    }
    Ok(())
}

/// There are offerings, each with a zone and a capacity type.
pub fn offerings(it: &impl TypeView) -> anyhow::Result<()> {
    ensure!(it.offering_views().next().is_some(), "has no offerings");
    for o in it.offering_views() {
        ensure!(!o.zone.is_empty(), "an offering has no zone");
        ensure!(
            !o.capacity_type.is_empty(),
            "an offering in {} has no capacity type",
            o.zone
        );
    }
    Ok(())
}

/// Every price is a finite, non-negative number.
pub fn prices(it: &impl TypeView) -> anyhow::Result<()> {
    for o in it.offering_views() {
        ensure!(
            o.price.is_finite() && o.price >= 0.0,
            "offering {}/{} has price {}, not a finite non-negative number",
            o.zone,
            o.capacity_type,
            o.price
        );
    }
    Ok(())
}

/// Quantities parse, and cpu, memory and pods are left after overhead.
pub fn allocatable(it: &impl TypeView) -> anyhow::Result<()> {
    let [capacity, kube, system, eviction] = Resources::ALL
        .map(|which| resources(it.resource_views(which)).with_context(|| which.name().to_string()));
    let (capacity, kube, system, eviction) = (capacity?, kube?, system?, eviction?);
    for resource in ["cpu", "memory", "pods"] {
        let get = |list: &[(&str, i64)]| {
            list.iter()
                .find(|(k, _)| *k == resource)
                .map_or(0, |(_, v)| *v)
        };
        let cap = get(&capacity);
        let reserved = get(&kube) + get(&system) + get(&eviction);
        ensure!(
            cap - reserved > 0,
            "allocatable {resource} is not positive (capacity {cap}, overhead {reserved})"
        );
    }
    Ok(())
}

/// Parses a resource list; lists are a handful of entries, so no map.
fn resources<'a>(
    list: impl Iterator<Item = (&'a str, &'a str)>,
) -> anyhow::Result<Vec<(&'a str, i64)>> {
    let mut out: Vec<(&str, i64)> = Vec::with_capacity(4);
    for (name, q) in list {
        let v = parse_resource(name, q).with_context(|| format!("resource {name}"))?;
        if v < 0 {
            bail!("resource {name} is negative ({q})");
        }
        if out.iter().any(|(k, _)| *k == name) {
            bail!("resource {name} appears twice");
        }
        out.push((name, v));
    }
    Ok(out)
}

pub fn instance(i: &wit::Instance, meta: &wit::ProviderMetadata) -> anyhow::Result<()> {
    let scheme = i
        .provider_id
        .split_once("://")
        .map(|(s, _)| s)
        .unwrap_or_default();
    ensure!(
        meta.provider_id_schemes.iter().any(|s| s == scheme),
        "providerID {:?} does not use one of the provider's schemes ({})",
        i.provider_id,
        meta.provider_id_schemes.join(", ")
    );
    ensure!(
        !i.node_claim.is_empty(),
        "instance {} names no NodeClaim",
        i.provider_id
    );
    resources(pairs(&i.capacity)).context("capacity")?;
    resources(pairs(&i.allocatable)).context("allocatable")?;
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
