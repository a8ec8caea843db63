//! A catalog in the JSON format of Karpenter's own kwok provider (its
//! `instance_types.json`, or the file `INSTANCE_TYPES_FILE_PATH` names), read
//! with that provider's rules: pods default to 110, every offering is
//! available, kube-reserved is 100m CPU and 10Mi, and the size and family
//! labels come from the type's name. Given the same file, both controllers
//! choose among the same machines at the same prices.

use crate::catalog::{LABEL_CPU, LABEL_FAMILY, LABEL_MEMORY, LABEL_SIZE};
use karpenter_plugin_sdk::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawType {
    name: String,
    #[serde(default)]
    offerings: Vec<RawOffering>,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    operating_systems: Vec<String>,
    #[serde(default)]
    resources: BTreeMap<String, String>,
}

// Karpenter's file spells these fields with capitals (Go's default names).
#[derive(Deserialize)]
struct RawOffering {
    #[serde(rename = "Price", default)]
    price: f64,
    #[serde(rename = "Requirements", default)]
    requirements: Vec<RawRequirement>,
    /// Instances a reserved offering's reservation has (Go's zero when absent).
    #[serde(rename = "ReservationCapacity", default)]
    reservation_capacity: u32,
}

#[derive(Deserialize)]
struct RawRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

/// Every type in the file, all offerings available.
#[cfg(test)]
fn parse(json: &str) -> Result<Vec<InstanceType>, String> {
    Index::of(json)?.each().collect()
}

/// The file's types by name, each parsed only when asked for: a create
/// parses the types its claim lists, not the catalog.
pub struct Index<'a> {
    types: Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>,
}

#[derive(Deserialize)]
struct Named<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
}

/// A type's name when it is the object's first key and a string without
/// escapes, as in Karpenter's file: read without scanning the rest of the
/// type, which a new plugin instance would otherwise do for every type once
/// more. Anything else is left to the full parse.
fn leading_name(item: &str) -> Option<&str> {
    let rest = item.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"name\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

fn not_the_format(e: serde_json::Error) -> String {
    format!("INSTANCE_TYPES is not Karpenter's kwok catalog JSON: {e}")
}

impl<'a> Index<'a> {
    pub fn of(json: &'a str) -> Result<Self, String> {
        let items: Vec<&RawValue> = serde_json::from_str(json).map_err(not_the_format)?;
        let types = items
            .into_iter()
            .map(|item| {
                let name = match leading_name(item.get()) {
                    Some(name) => std::borrow::Cow::Borrowed(name),
                    None => {
                        let named: Named =
                            serde_json::from_str(item.get()).map_err(not_the_format)?;
                        named.name
                    }
                };
                Ok((name, item))
            })
            .collect::<Result<_, String>>()?;
        Ok(Index { types })
    }

    /// Every type, in the file's order.
    pub fn each(&self) -> impl Iterator<Item = Result<InstanceType, String>> + '_ {
        self.types.iter().map(|(_, item)| parse_one(item))
    }

    /// Each name's items, as JSON, in the file's order.
    pub fn by_name(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut named: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, item) in &self.types {
            named.entry(name).or_default().push(item.get());
        }
        named
    }

    /// The types of this name (one, in Karpenter's file).
    pub fn named<'s>(
        &'s self,
        name: &'s str,
    ) -> impl Iterator<Item = Result<InstanceType, String>> + 's {
        self.types
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, item)| parse_one(item))
    }
}

fn parse_one(item: &RawValue) -> Result<InstanceType, String> {
    let raw: RawType = serde_json::from_str(item.get()).map_err(not_the_format)?;
    instance_type(raw).map_err(|e| format!("INSTANCE_TYPES: {e}"))
}

fn instance_type(raw: RawType) -> Result<InstanceType, String> {
    let cpu = raw.resources.get("cpu").cloned().unwrap_or_default();
    let memory = raw.resources.get("memory").cloned().unwrap_or_default();
    let mut capacity = raw.resources.clone();
    capacity
        .entry("pods".into())
        .or_insert_with(|| "110".into());
    let capacity: Vec<(String, String)> = capacity.into_iter().collect();

    let mut offerings = Vec::with_capacity(raw.offerings.len());
    let mut zones: Vec<String> = Vec::new();
    let mut capacity_types: Vec<String> = Vec::new();
    for o in &raw.offerings {
        let mut zone = None;
        let mut capacity_type = None;
        let mut requirements = Vec::new();
        for r in &o.requirements {
            let single = (r.operator == "In" && r.values.len() == 1).then(|| r.values[0].clone());
            match r.key.as_str() {
                labels::ZONE => zone = single,
                labels::CAPACITY_TYPE => capacity_type = single,
                _ => requirements.push(requirement(r)?),
            }
        }
        let (Some(zone), Some(capacity_type)) = (zone, capacity_type) else {
            return Err(format!(
                "{}: every offering needs one zone and one capacity type (In, one value)",
                raw.name
            ));
        };
        if !o.price.is_finite() || o.price < 0.0 {
            return Err(format!(
                "{}: price {} is not a finite non-negative number",
                raw.name, o.price
            ));
        }
        if !zones.contains(&zone) {
            zones.push(zone.clone());
        }
        if !capacity_types.contains(&capacity_type) {
            capacity_types.push(capacity_type.clone());
        }
        let reservation_capacity =
            (capacity_type == labels::RESERVED).then_some(o.reservation_capacity);
        offerings.push(Offering {
            zone,
            capacity_type,
            price: o.price,
            available: true,
            reservation_capacity,
            requirements,
        });
    }

    Ok(InstanceType {
        requirements: vec![
            req_in(labels::INSTANCE_TYPE, &[&raw.name]),
            req_in(labels::ARCH, &[&raw.architecture]),
            req_in(labels::OS, &raw.operating_systems),
            req_in(labels::ZONE, &zones),
            req_in(labels::CAPACITY_TYPE, &capacity_types),
            req_in(LABEL_SIZE, &[size_of(&raw.name, &cpu)]),
            req_in(LABEL_FAMILY, &[family_of(&raw.name)]),
            req_in(LABEL_CPU, &[&cpu]),
            req_in(LABEL_MEMORY, &[&memory]),
        ],
        name: raw.name,
        offerings,
        capacity,
        overhead: Overhead {
            kube_reserved: resources(&[("cpu", "100m".into()), ("memory", "10Mi".into())]),
            system_reserved: Vec::new(),
            eviction_threshold: Vec::new(),
        },
    })
}

fn requirement(r: &RawRequirement) -> Result<Requirement, String> {
    let operator = match r.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => return Err(format!("operator {other:?} of {} is not supported", r.key)),
    };
    Ok(Requirement {
        key: r.key.clone(),
        operator,
        values: r.values.clone(),
        min_values: None,
    })
}

/// AWS-style names (`m5.large`) carry their size; others take the CPU count.
fn size_of(name: &str, cpu: &str) -> String {
    const SIZES: [&str; 5] = ["nano", "micro", "small", "medium", "large"];
    if let Some((family, size)) = name.split_once('.') {
        let word = family.chars().all(|c| c.is_alphanumeric() || c == '_');
        let xlarge = size
            .strip_suffix("xlarge")
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
        if word && (SIZES.contains(&size) || xlarge || size == "metal") {
            return size.to_string();
        }
    }
    cpu.to_string()
}

/// The name up to its first `.` or `-`, or its first character.
fn family_of(name: &str) -> String {
    match name.split_once(['.', '-']) {
        Some((family, _)) => family.to_string(),
        None => name.chars().next().map(String::from).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"[{"name":"c-2x-amd64-linux","architecture":"amd64","operatingSystems":["linux"],
        "resources":{"cpu":"2","memory":"4Gi","ephemeral-storage":"20Gi"},
        "offerings":[
          {"Price":0.03,"Available":true,"Requirements":[
            {"key":"karpenter.sh/capacity-type","operator":"In","values":["spot"]},
            {"key":"topology.kubernetes.io/zone","operator":"In","values":["test-zone-a"]}]},
          {"Price":0.05,"Available":false,"Requirements":[
            {"key":"karpenter.sh/capacity-type","operator":"In","values":["on-demand"]},
            {"key":"topology.kubernetes.io/zone","operator":"In","values":["test-zone-b"]}]}]}]"#;

    fn values<'a>(it: &'a InstanceType, key: &str) -> &'a [String] {
        &it.requirements
            .iter()
            .find(|r| r.key == key)
            .expect(key)
            .values
    }

    #[test]
    fn a_karpenter_catalog_reads_as_its_provider_reads_it() {
        let types = parse(ONE).expect("parses");
        let it = &types[0];
        assert_eq!(it.name, "c-2x-amd64-linux");
        assert_eq!(values(it, labels::ZONE), ["test-zone-a", "test-zone-b"]);
        assert_eq!(values(it, labels::CAPACITY_TYPE), ["spot", "on-demand"]);
        assert_eq!(values(it, LABEL_FAMILY), ["c"]);
        assert_eq!(values(it, LABEL_SIZE), ["2"]);
        assert_eq!(values(it, LABEL_MEMORY), ["4Gi"]);
        assert!(
            it.capacity.contains(&("pods".into(), "110".into())),
            "pods default to 110"
        );
        assert!(
            it.offerings.iter().all(|o| o.available),
            "Karpenter's kwok makes every offering available"
        );
        assert_eq!(it.offerings[1].price, 0.05);
        assert_eq!(
            it.overhead.kube_reserved,
            resources(&[("cpu", "100m".into()), ("memory", "10Mi".into())])
        );
    }

    #[test]
    fn a_type_is_found_by_name_and_parsed_alone() {
        let two = format!(
            "[{}, {}]",
            &ONE[1..ONE.len() - 1],
            r#"{"name":"m-4x-amd64-linux","resources":{"cpu":"4"},"offerings":"not offerings"}"#
        );
        let index = Index::of(&two).expect("names read");
        let c2 = index.named("c-2x-amd64-linux").collect::<Vec<_>>();
        assert_eq!(c2.len(), 1);
        assert_eq!(c2[0].as_ref().expect("parses").name, "c-2x-amd64-linux");
        assert!(
            index.named("m-4x-amd64-linux").all(|t| t.is_err()),
            "a broken type fails where it is read"
        );
        assert_eq!(index.named("absent").count(), 0);
        assert!(parse(&two).is_err(), "the whole catalog reads every type");
    }

    #[test]
    fn each_name_s_items_read_back_as_its_types() {
        let two = format!("[{}, {}]", &ONE[1..ONE.len() - 1], &ONE[1..ONE.len() - 1]);
        let index = Index::of(&two).expect("names read");
        let named = index.by_name();
        assert_eq!(named.len(), 1);
        let items = &named["c-2x-amd64-linux"];
        assert_eq!(items.len(), 2);
        let again = format!("[{}]", items.join(","));
        let types: Vec<_> = Index::of(&again)
            .expect("an entry is a catalog")
            .each()
            .collect::<Result<_, _>>()
            .expect("parses");
        let whole = parse(&two).expect("parses");
        assert_eq!(format!("{types:?}"), format!("{whole:?}"));
    }

    #[test]
    fn a_name_is_read_wherever_the_file_puts_it() {
        let first = r#"{"name": "c-2x", "resources": {"cpu": "2"}}"#;
        assert_eq!(leading_name(first), Some("c-2x"));
        let later = r#"{"resources": {"cpu": "2"}, "name": "c-2x"}"#;
        let escaped = r#"{"name": "c-2x\u002dbig"}"#;
        assert_eq!(leading_name(later), None);
        assert_eq!(leading_name(escaped), None);
        let file = format!("[{later}, {escaped}]");
        let index = Index::of(&file).expect("names read");
        assert_eq!(index.named("c-2x").count(), 1);
        assert_eq!(index.named("c-2x-big").count(), 1);
    }

    #[test]
    fn names_give_size_and_family_as_karpenter_derives_them() {
        assert_eq!(size_of("m5.2xlarge", "8"), "2xlarge");
        assert_eq!(size_of("m5.metal", "96"), "metal");
        assert_eq!(size_of("Standard_D2s_v5", "2"), "2");
        assert_eq!(family_of("m5.2xlarge"), "m5");
        assert_eq!(family_of("n2-standard-4"), "n2");
        assert_eq!(family_of("Standard_D2s_v5"), "S");
    }

    #[test]
    fn an_offering_without_a_zone_is_refused_with_its_type() {
        let bad = r#"[{"name":"x-1","architecture":"amd64","operatingSystems":["linux"],"resources":{"cpu":"1"},
            "offerings":[{"Price":1,"Requirements":[{"key":"karpenter.sh/capacity-type","operator":"In","values":["spot"]}]}]}]"#;
        let err = parse(bad).expect_err("refused");
        assert!(err.contains("x-1") && err.contains("zone"), "{err}");
        assert!(parse("{").expect_err("not JSON").contains("INSTANCE_TYPES"));
    }
}
