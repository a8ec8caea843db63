//! Checks of the catalog: every instance type is judged on each property
//! separately, and every offender is named (up to a few), not just the first.

use super::report::Report;
use karpenter_runtime::validate;
use karpenter_runtime::wit;
use std::collections::BTreeSet;

/// Offenders listed per check; the rest are counted.
const SHOWN: usize = 5;

pub(super) fn check(report: &mut Report, types: &Result<Vec<wit::InstanceType>, String>) {
    let types = match types {
        Ok(types) if types.is_empty() => {
            Err("get-instance-types returned no instance types".to_string())
        }
        Ok(types) => Ok(types),
        Err(e) => Err(e.clone()),
    };
    report.push(
        CATALOG,
        "get-instance-types answers with instance types",
        match &types {
            Ok(types) => Ok(format!("{} instance types", types.len())),
            Err(e) => Err(e.clone()),
        },
    );
    let checks: [(&'static str, &'static str, Property); 5] = [
        (
            "well-known-labels",
            "instance types define every well-known label",
            well_known_labels,
        ),
        (
            "offerings",
            "offerings carry a zone and a capacity type, and the type's zone and capacity-type requirements cover them",
            offerings,
        ),
        (
            "prices",
            "prices are finite and non-negative",
            validate::prices,
        ),
        (
            "allocatable",
            "allocatable cpu, memory and pods are positive after overhead",
            validate::allocatable,
        ),
        (
            "requirements",
            "requirements are well formed and names unique",
            requirements,
        ),
    ];
    for (id, title, property) in checks {
        let result = match &types {
            Ok(types) if id == "requirements" => {
                each(types, property).and_then(|ok| unique(types).map(|()| ok))
            }
            Ok(types) => each(types, property),
            Err(_) => {
                report.skip(id, title, CATALOG);
                continue;
            }
        };
        report.push(id, title, result);
    }
}

/// The check whose failure the catalog's other checks are skipped for.
pub(super) const CATALOG: &str = "get-instance-types";

type Property = fn(&wit::InstanceType) -> anyhow::Result<()>;

fn each(types: &[wit::InstanceType], property: Property) -> Result<String, String> {
    let failures: Vec<String> = types
        .iter()
        .filter_map(|it| {
            property(it)
                .err()
                .map(|e| format!("instance type {:?}: {e:#}", it.name))
        })
        .collect();
    verdict(&failures, types.len())
}

/// Passes with the count of instance types, or fails naming the first few
/// offenders and counting the rest.
fn verdict(failures: &[String], types: usize) -> Result<String, String> {
    if failures.is_empty() {
        return Ok(format!("{types} instance types"));
    }
    let mut message = failures
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    if failures.len() > SHOWN {
        message.push_str(&format!(
            "\n... and {} more of {types} instance types",
            failures.len() - SHOWN
        ));
    }
    Err(message)
}

fn unique(types: &[wit::InstanceType]) -> Result<(), String> {
    let mut names = BTreeSet::new();
    for it in types {
        if !names.insert(it.name.as_str()) {
            return Err(format!("instance type {:?} appears twice", it.name));
        }
    }
    Ok(())
}

fn well_known_labels(it: &wit::InstanceType) -> anyhow::Result<()> {
    validate::well_known_labels(it)
}

fn requirements(it: &wit::InstanceType) -> anyhow::Result<()> {
    anyhow::ensure!(!it.name.is_empty(), "empty name");
    validate::requirements(it)?;
    let name = it
        .requirements
        .iter()
        .find(|r| r.key == validate::WELL_KNOWN_LABELS[0]);
    if let Some(r) = name {
        anyhow::ensure!(
            r.operator == wit::Operator::In && r.values == [it.name.clone()],
            "requirement {} must be In [{}]",
            r.key,
            it.name
        );
    }
    Ok(())
}

/// Zone and capacity type on every offering, and the type's requirements on
/// them In the union of the offerings' values (the contract says so).
fn offerings(it: &wit::InstanceType) -> anyhow::Result<()> {
    validate::offerings(it)?;
    for (key, of) in [
        (
            "topology.kubernetes.io/zone",
            (|o: &wit::Offering| o.zone.clone()) as fn(&wit::Offering) -> String,
        ),
        ("karpenter.sh/capacity-type", |o| o.capacity_type.clone()),
    ] {
        let offered: BTreeSet<String> = it.offerings.iter().map(of).collect();
        let Some(r) = it.requirements.iter().find(|r| r.key == key) else {
            continue; // reported by well-known-labels
        };
        if r.operator != wit::Operator::In {
            continue;
        }
        let allowed: BTreeSet<String> = r.values.iter().cloned().collect();
        let missing: Vec<&String> = offered.difference(&allowed).collect();
        anyhow::ensure!(
            missing.is_empty(),
            "offerings in {missing:?} are outside its requirement {key} In {:?}",
            r.values
        );
    }
    Ok(())
}

/// A plugin's compact catalog, when it answers one (the tables of contract
/// 0.1.4, else the compact catalog of 0.1.2), is what the host uses, so it
/// must list what get-instance-types lists. `compact` is that call's own
/// answer with the call's name, `listed` get-instance-types' (asked only
/// when there is a compact catalog to compare).
pub(super) fn compact_matches(
    report: &mut Report,
    compact: Result<Option<(&str, Vec<wit::InstanceType>)>, String>,
    listed: Option<Result<Vec<wit::InstanceType>, String>>,
) {
    const ID: &str = "compact-catalog";
    const TITLE: &str = "a compact catalog lists what get-instance-types lists";
    let result = match (compact, listed) {
        (Err(e), _) => Err(e),
        (Ok(None), _) | (Ok(Some(_)), None) => Ok(
            "no compact catalog (no catalog-table or catalog export, or get-table and get-catalog answer none): get-instance-types is used"
                .into(),
        ),
        (Ok(Some((call, _))), Some(Err(e))) => Err(format!(
            "get-instance-types failed where {call} answered: {e}"
        )),
        (Ok(Some((call, compact))), Some(Ok(listed))) => same_types(call, &compact, &listed)
            .map(|counted| format!("{call}: {counted}")),
    };
    report.push(ID, TITLE, result);
}

fn same_types(
    call: &str,
    compact: &[wit::InstanceType],
    listed: &[wit::InstanceType],
) -> Result<String, String> {
    let by_name = |types: &[wit::InstanceType]| {
        types
            .iter()
            .map(|it| {
                (
                    it.name.clone(),
                    serde_json::to_value(it).unwrap_or_default(),
                )
            })
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (compact_types, listed_types) = (by_name(compact), by_name(listed));
    let differing: Vec<String> = compact_types
        .keys()
        .chain(listed_types.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(
            |name| match (compact_types.get(name), listed_types.get(name)) {
                (Some(a), Some(b)) if a == b => None,
                (Some(_), Some(_)) => Some(format!("instance type {name:?} differs")),
                (Some(_), None) => Some(format!("instance type {name:?} is only in {call}")),
                (None, _) => Some(format!(
                    "instance type {name:?} is only in get-instance-types"
                )),
            },
        )
        .collect();
    verdict(&differing, compact.len())
}
