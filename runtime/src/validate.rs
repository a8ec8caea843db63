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

pub fn instance_types(types: &[wit::InstanceType]) -> anyhow::Result<()> {
    ensure!(
        types.len() <= MAX_INSTANCE_TYPES,
        "{} instance types (at most {MAX_INSTANCE_TYPES})",
        types.len()
    );
    let mut names = BTreeSet::new();
    for it in types {
        instance_type(it).with_context(|| format!("instance type {:?}", it.name))?;
        ensure!(
            names.insert(it.name.as_str()),
            "instance type {:?} appears twice",
            it.name
        );
    }
    Ok(())
}

fn instance_type(it: &wit::InstanceType) -> anyhow::Result<()> {
    ensure!(!it.name.is_empty(), "empty name");
    well_known_labels(it)?;
    requirements(it)?;
    offerings(it)?;
    prices(it)?;
    allocatable(it)
}

/// Every well-known label is defined by a requirement.
pub fn well_known_labels(it: &wit::InstanceType) -> anyhow::Result<()> {
    for label in WELL_KNOWN_LABELS {
        ensure!(
            it.requirements.iter().any(|r| r.key == label),
            "does not define the well-known label {label}"
        );
    }
    Ok(())
}

/// Operators have the values they need.
pub fn requirements(it: &wit::InstanceType) -> anyhow::Result<()> {
    for r in &it.requirements {
        use wit::Operator::*;
        match r.operator {
            In => ensure!(
                !r.values.is_empty(),
                "requirement {} In has no values",
                r.key
            ),
            Gt | Lt | Gte | Lte => ensure!(
                r.values.len() == 1 && r.values[0].parse::<i64>().is_ok(),
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
pub fn offerings(it: &wit::InstanceType) -> anyhow::Result<()> {
    ensure!(!it.offerings.is_empty(), "has no offerings");
    for o in &it.offerings {
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
pub fn prices(it: &wit::InstanceType) -> anyhow::Result<()> {
    for o in &it.offerings {
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
pub fn allocatable(it: &wit::InstanceType) -> anyhow::Result<()> {
    let capacity = resources(&it.capacity).context("capacity")?;
    let kube = resources(&it.overhead.kube_reserved).context("kube-reserved")?;
    let system = resources(&it.overhead.system_reserved).context("system-reserved")?;
    let eviction = resources(&it.overhead.eviction_threshold).context("eviction-threshold")?;
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
fn resources(list: &[(String, String)]) -> anyhow::Result<Vec<(&str, i64)>> {
    let mut out: Vec<(&str, i64)> = Vec::with_capacity(list.len());
    for (name, q) in list {
        let v = parse_resource(name, q).with_context(|| format!("resource {name}"))?;
        if v < 0 {
            bail!("resource {name} is negative ({q})");
        }
        if out.iter().any(|(k, _)| k == name) {
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
    resources(&i.capacity).context("capacity")?;
    resources(&i.allocatable).context("allocatable")?;
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
