//! Our karpenter.sh CRDs and the autoscaling.x-k8s.io CapacityBuffer CRD
//! beside upstream Karpenter's, from the Go module of the release
//! tests/peer/versions.env pins (`go mod download`, through the module
//! proxy): the same name, group, names, scope, versions, subresources and
//! printer columns, and under every field the same type, format, enum,
//! default, pattern, bounds, required fields, list and map semantics and CEL
//! rules. Descriptions are our own and are not compared. Where we differ on
//! purpose, [`ACCEPTED`] says so and why; any other difference fails.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Differences kept on purpose: the end of their field's path and facet,
/// and why.
const ACCEPTED: &[(&str, &str)] = &[
    (
        ".values maxLength",
        "upstream puts maxLength and pattern on the values array, where they check nothing",
    ),
    (
        ".values pattern",
        "upstream puts maxLength and pattern on the values array, where they check nothing",
    ),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pinned() -> (String, String) {
    let text = std::fs::read_to_string(repo().join("tests/peer/versions.env"))
        .expect("tests/peer/versions.env");
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in versions.env"))
            .trim()
            .to_string()
    };
    (get("KARPENTER_VERSION"), get("KARPENTER_GO"))
}

/// The unpacked upstream module.
fn upstream_dir() -> PathBuf {
    let (version, go) = pinned();
    let module = format!("sigs.k8s.io/karpenter@{version}");
    let out = Command::new("go")
        .args(["mod", "download", "-json", &module])
        .env("GOTOOLCHAIN", &go)
        .env("GOFLAGS", "-modcacherw")
        .output()
        .expect("go (the Go toolchain) runs");
    let info: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "go mod download {module}: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let dir = info["Dir"]
        .as_str()
        .unwrap_or_else(|| panic!("go mod download {module}: {info}"));
    PathBuf::from(dir)
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const FACETS: &[&str] = &[
    "type",
    "format",
    "enum",
    "default",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "nullable",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
];

/// Every comparable fact of a CRD, as `what` -> value.
fn facts(crd: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let spec = &crd["spec"];
    out.insert("name".into(), crd["metadata"]["name"].to_string());
    out.insert("group".into(), spec["group"].to_string());
    let names = &spec["names"];
    for key in ["kind", "listKind", "plural", "singular"] {
        out.insert(format!("names {key}"), names[key].to_string());
    }
    out.insert("names shortNames".into(), sorted(&names["shortNames"]));
    out.insert("names categories".into(), sorted(&names["categories"]));
    out.insert("scope".into(), spec["scope"].to_string());
    for version in spec["versions"].as_array().into_iter().flatten() {
        let v = version["name"].as_str().unwrap_or("?");
        for key in ["served", "storage", "subresources"] {
            out.insert(format!("{v} {key}"), version[key].to_string());
        }
        for column in version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = column["name"].as_str().unwrap_or("?");
            let shape = serde_json::json!({
                "type": column["type"], "jsonPath": column["jsonPath"],
                "priority": column.get("priority").cloned().unwrap_or(Value::from(0)),
            });
            out.insert(format!("{v} column {name}"), shape.to_string());
        }
        walk(
            format!("{v} "),
            &version["schema"]["openAPIV3Schema"],
            &mut out,
        );
    }
    out
}

/// A list's items in order, so that lists are compared as sets.
fn sorted(v: &Value) -> String {
    let mut list: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|x| x.to_string())
        .collect();
    list.sort();
    list.join(",")
}

fn walk(path: String, schema: &Value, out: &mut BTreeMap<String, String>) {
    for facet in FACETS {
        if let Some(v) = schema.get(*facet) {
            out.insert(format!("{path} {facet}"), v.to_string());
        }
    }
    if let Some(required) = schema.get("required") {
        out.insert(format!("{path} required"), sorted(required));
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or("?");
        let mut shape = rule.clone();
        if let Some(o) = shape.as_object_mut() {
            o.remove("rule");
        }
        out.insert(format!("{path} rule {text}"), shape.to_string());
    }
    if let Some(any) = schema["anyOf"].as_array() {
        out.insert(
            format!("{path} anyOf"),
            Value::from(any.clone()).to_string(),
        );
    }
    for (name, s) in schema["properties"].as_object().into_iter().flatten() {
        walk(format!("{}.{name}", path.trim_end()), s, out);
    }
    if let Some(items) = schema.get("items") {
        walk(format!("{}[]", path.trim_end()), items, out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(format!("{}{{}}", path.trim_end()), values, out);
    }
}

/// What differs between ours and upstream's, accepted differences left out.
fn differences(ours: &Value, upstream: &Value) -> Vec<String> {
    let (a, b) = (facts(ours), facts(upstream));
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (x, y) = (a.get(k), b.get(k));
            (x != y).then(|| {
                format!(
                    "{k}: ours {}, upstream {}",
                    x.map_or("absent", String::as_str),
                    y.map_or("absent", String::as_str)
                )
            })
        })
        .filter(|line| {
            let key = line.split_once(": ").map_or(line.as_str(), |(k, _)| k);
            !ACCEPTED.iter().any(|(end, _)| key.ends_with(end))
        })
        .collect()
}

fn compare(file: &str) {
    let ours = yaml(&repo().join("charts/karpenter/crds").join(file));
    let upstream = yaml(&upstream_dir().join("pkg/apis/crds").join(file));
    let d = differences(&ours, &upstream);
    assert!(
        d.is_empty(),
        "{file} differs from upstream's in {} places:\n{}",
        d.len(),
        d.join("\n")
    );
}

#[test]
fn nodepools_match_upstream() {
    compare("karpenter.sh_nodepools.yaml");
}

#[test]
fn nodeclaims_match_upstream() {
    compare("karpenter.sh_nodeclaims.yaml");
}

#[test]
fn nodeoverlays_match_upstream() {
    compare("karpenter.sh_nodeoverlays.yaml");
}

#[test]
fn capacitybuffers_match_upstream() {
    compare("autoscaling.x-k8s.io_capacitybuffers.yaml");
}

#[test]
fn a_difference_is_caught_and_named() {
    let upstream = yaml(&upstream_dir().join("pkg/apis/crds/karpenter.sh_nodeoverlays.yaml"));
    let mut ours = yaml(&repo().join("charts/karpenter/crds/karpenter.sh_nodeoverlays.yaml"));
    let spec = ours
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(Value::as_object_mut)
        .expect("spec properties");
    spec["weight"]["maximum"] = Value::from(100);
    spec.remove("price");
    assert_eq!(
        differences(&ours, &upstream),
        [
            "v1alpha1.spec.price pattern: ours absent, upstream \"^\\\\d+(\\\\.\\\\d+)?$\"",
            "v1alpha1.spec.price type: ours absent, upstream \"string\"",
            "v1alpha1.spec.weight maximum: ours 100, upstream 10000",
        ]
    );
}
