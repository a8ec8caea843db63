//! The karpenter.sh/v1 Rust types and the CRDs in charts/karpenter/crds
//! describe the same API: the same fields under spec and status with the same
//! types, the same names, subresources and printer columns. The YAML carries
//! what the Rust types cannot (defaults, patterns, CEL rules); the end-to-end
//! check that a real API server enforces those is tests/crds/test.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_controller::crds::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool};
use kube::CustomResourceExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn repo_file(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// charts/karpenter/crds/karpenter.sh_<plural>.yaml as JSON.
fn chart_crd(plural: &str) -> Value {
    chart_crd_of("karpenter.sh", plural)
}

/// charts/karpenter/crds/<group>_<plural>.yaml as JSON.
fn chart_crd_of(group: &str, plural: &str) -> Value {
    let text = repo_file(&format!("charts/karpenter/crds/{group}_{plural}.yaml"));
    serde_saphyr::from_str::<CustomResourceDefinition>(&text)
        .unwrap_or_else(|e| panic!("{plural}: not a CustomResourceDefinition: {e}"));
    serde_saphyr::from_str(&text).expect("YAML")
}

fn rust_crd<K: CustomResourceExt>() -> Value {
    serde_json::to_value(K::crd()).expect("serializes")
}

/// Every field under spec and status of a CRD's schema, by path
/// (`spec.template.spec.requirements[].key`: `[]` for list items, `{}` for
/// map values), with its type (`int-or-string` for quantities).
fn fields(crd: &Value) -> BTreeMap<String, String> {
    fn walk(path: String, schema: &Value, out: &mut BTreeMap<String, String>) {
        let type_ = if schema["x-kubernetes-int-or-string"] == true {
            "int-or-string"
        } else {
            schema["type"].as_str().unwrap_or("")
        };
        out.insert(path.clone(), type_.to_string());
        if let Some(properties) = schema["properties"].as_object() {
            for (name, s) in properties {
                walk(format!("{path}.{name}"), s, out);
            }
        }
        if let Some(items) = schema.get("items") {
            walk(format!("{path}[]"), items, out);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            walk(format!("{path}{{}}"), values, out);
        }
    }
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut out = BTreeMap::new();
    for top in ["spec", "status"] {
        if let Some(s) = schema["properties"].get(top) {
            walk(top.to_string(), s, &mut out);
        }
    }
    out
}

/// What the Rust type has and the CRD lacks, and the other way round, and
/// fields whose types differ.
fn disagreements(rust: &Value, yaml: &Value) -> Vec<String> {
    let (rust, yaml) = (fields(rust), fields(yaml));
    let mut out = Vec::new();
    for (path, type_) in &rust {
        match yaml.get(path) {
            None => out.push(format!("only in the Rust type: {path}")),
            Some(t) if t != type_ => {
                out.push(format!("{path}: {type_} in the Rust type, {t} in the CRD"))
            }
            Some(_) => {}
        }
    }
    for path in yaml.keys().filter(|p| !rust.contains_key(*p)) {
        out.push(format!("only in the CRD: {path}"));
    }
    out
}

/// Group, names, scope, version, subresources and printer columns.
fn header(crd: &Value) -> Value {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let version = &spec["versions"][0];
    json!({
        "name": crd["metadata"]["name"],
        "group": spec["group"],
        "scope": spec["scope"],
        "kind": names["kind"],
        "plural": names["plural"],
        "singular": names["singular"],
        "shortNames": names["shortNames"],
        "categories": names["categories"],
        "versions": spec["versions"].as_array().map(Vec::len),
        "version": version["name"],
        "served": version["served"],
        "storage": version["storage"],
        "subresources": version["subresources"],
        "columns": version["additionalPrinterColumns"],
    })
}

fn assert_agree(rust: &Value, yaml: &Value) {
    let d = disagreements(rust, yaml);
    assert!(
        d.is_empty(),
        "the Rust type and the CRD disagree:\n{}",
        d.join("\n")
    );
    assert_eq!(header(rust), header(yaml));
}

#[test]
fn nodepool_type_and_crd_agree() {
    let yaml = chart_crd("nodepools");
    assert_agree(&rust_crd::<NodePool>(), &yaml);
    assert_eq!(yaml["spec"]["names"]["listKind"], "NodePoolList");
    assert!(fields(&yaml).contains_key("spec.template.spec.requirements[].minValues"));
}

#[test]
fn nodeclaim_type_and_crd_agree() {
    let yaml = chart_crd("nodeclaims");
    assert_agree(&rust_crd::<NodeClaim>(), &yaml);
    assert_eq!(yaml["spec"]["names"]["listKind"], "NodeClaimList");
    assert!(fields(&yaml).contains_key("spec.resources.requests{}"));
}

#[test]
fn nodeoverlay_type_and_crd_agree() {
    let yaml = chart_crd("nodeoverlays");
    assert_agree(&rust_crd::<NodeOverlay>(), &yaml);
    assert_eq!(yaml["spec"]["names"]["listKind"], "NodeOverlayList");
    assert!(fields(&yaml).contains_key("spec.capacity{}"));
}

#[test]
fn capacitybuffer_type_and_crd_agree() {
    let yaml = chart_crd_of("autoscaling.x-k8s.io", "capacitybuffers");
    assert_agree(&rust_crd::<CapacityBuffer>(), &yaml);
    assert_eq!(yaml["spec"]["names"]["listKind"], "CapacityBufferList");
    assert!(fields(&yaml).contains_key("spec.scalableRef.kind"));
}

fn spec_properties(crd: &mut Value) -> &mut serde_json::Map<String, Value> {
    crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(Value::as_object_mut)
        .expect("spec properties")
}

#[test]
fn a_field_on_one_side_only_or_of_another_type_is_caught() {
    let rust = rust_crd::<NodePool>();

    let mut yaml = chart_crd("nodepools");
    spec_properties(&mut yaml).insert("surge".into(), json!({"type": "integer"}));
    assert_eq!(disagreements(&rust, &yaml), ["only in the CRD: spec.surge"]);

    let mut yaml = chart_crd("nodepools");
    spec_properties(&mut yaml).remove("weight");
    assert_eq!(
        disagreements(&rust, &yaml),
        ["only in the Rust type: spec.weight"]
    );

    let mut yaml = chart_crd("nodepools");
    spec_properties(&mut yaml)["replicas"]["type"] = json!("string");
    assert_eq!(
        disagreements(&rust, &yaml),
        ["spec.replicas: integer in the Rust type, string in the CRD"]
    );

    let mut yaml = chart_crd("nodeclaims");
    let budgets_like = json!({"type": "array", "items": {"type": "object",
        "properties": {"nodes": {"type": "string"}}}});
    spec_properties(&mut yaml).insert("budgets".into(), budgets_like);
    assert_eq!(
        disagreements(&rust_crd::<NodeClaim>(), &yaml),
        [
            "only in the CRD: spec.budgets",
            "only in the CRD: spec.budgets[]",
            "only in the CRD: spec.budgets[].nodes"
        ]
    );
}

/// The NodePools users apply (the seeds and the examples) read into the
/// Rust type.
#[test]
fn seed_and_example_nodepools_parse_into_the_rust_type() {
    let mut pools = Vec::new();
    for file in [
        "tests/crds/seeds/001-general-purpose.yaml",
        "examples/azure/cpu_nodepool.yaml",
        "examples/azure/gpu_nodepool.yaml",
        "examples/kwok/nodepool.yaml",
    ] {
        let text = repo_file(file);
        for value in serde_saphyr::from_multiple::<Value>(&text).expect("YAML") {
            if value["kind"] == "NodePool" {
                let pool: NodePool = serde_json::from_value(value)
                    .unwrap_or_else(|e| panic!("{file}: not a NodePool: {e}"));
                pools.push(pool);
            }
        }
    }
    assert_eq!(pools.len(), 4);
    let seed = &pools[0];
    assert_eq!(seed.metadata.name.as_deref(), Some("general-purpose"));
    assert_eq!(seed.spec.template.spec.node_class_ref.kind, "AKSNodeClass");
    assert_eq!(seed.spec.template.spec.requirements.len(), 4);
    assert_eq!(
        seed.spec.template.spec.expire_after.as_deref(),
        Some("Never")
    );
}
