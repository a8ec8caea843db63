//! Whether a NodeClass kind's schema is one the API server accepts as a CRD's
//! `openAPIV3Schema`: a structural schema (every field typed, no `$ref`, no
//! keywords outside Kubernetes' subset of OpenAPI v3, value validations only
//! under allOf/anyOf/oneOf/not, metadata restricted to name and
//! generateName), from which the host can build the CRD.

use karpenter_controller::crds::node_class;
use karpenter_runtime::wit::NodeClassKind;
use serde_json::{Map, Value};

const TYPES: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];

/// The keywords of Kubernetes' JSONSchemaProps that a CRD may use.
const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "nullable",
    "example",
    "externalDocs",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Keywords that only the structural part of a schema may carry, never a
/// branch of allOf/anyOf/oneOf/not.
const NOT_IN_JUNCTORS: &[&str] = &[
    "type",
    "default",
    "additionalProperties",
    "nullable",
    "description",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

pub(super) fn check_kinds(kinds: &[NodeClassKind]) -> Result<String, String> {
    let mut problems = Vec::new();
    for kind in kinds {
        match serde_json::from_str::<Value>(&kind.schema) {
            Err(e) => problems.push(format!("{}: the schema is not JSON: {e}", kind.kind)),
            Ok(schema) => {
                problems.extend(
                    structural(&schema)
                        .into_iter()
                        .map(|p| format!("{}: {p}", kind.kind)),
                );
                if let Err(e) = node_class::crd(kind) {
                    problems.push(format!("{}: no CRD can be built: {e:#}", kind.kind));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(format!("{} kinds", kinds.len()))
    } else {
        Err(problems.join("\n"))
    }
}

/// Every reason the schema is not structural, with the path of each.
pub fn structural(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    match schema.as_object() {
        None => problems.push("the schema is not a JSON object".to_string()),
        Some(root) => {
            if root.get("type").and_then(Value::as_str) != Some("object") {
                problems.push("the root must be of type object".to_string());
            }
            node(root, "", false, &mut problems);
            if let Some(meta) = root
                .get("properties")
                .and_then(|p| p.get("metadata"))
                .and_then(Value::as_object)
            {
                metadata(meta, &mut problems);
            }
        }
    }
    problems
}

fn node(schema: &Map<String, Value>, path: &str, in_junctor: bool, problems: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    for key in schema.keys() {
        if !KEYWORDS.contains(&key.as_str()) {
            problems.push(format!(
                "{at}: keyword {key:?} is not allowed in a CRD schema"
            ));
        }
        if in_junctor && NOT_IN_JUNCTORS.contains(&key.as_str()) {
            problems.push(format!(
                "{at}: {key:?} is not allowed inside allOf/anyOf/oneOf/not"
            ));
        }
    }
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    let type_ = schema.get("type").and_then(Value::as_str);
    if !in_junctor {
        match (type_, schema.get("type")) {
            (Some(t), _) if !TYPES.contains(&t) => {
                problems.push(format!("{at}: type {t:?} is not an OpenAPI type"))
            }
            (None, Some(other)) => {
                problems.push(format!("{at}: type must be a string, not {other}"))
            }
            (None, None)
                if !flag("x-kubernetes-int-or-string")
                    && !flag("x-kubernetes-preserve-unknown-fields") =>
            {
                problems.push(format!(
                    "{at}: no type (every field of a structural schema has one)"
                ))
            }
            _ => {}
        }
    }
    if flag("uniqueItems") {
        problems.push(format!("{at}: uniqueItems: true is not allowed"));
    }
    if let Some(props) = schema.get("properties") {
        if !in_junctor && type_.is_some_and(|t| t != "object") {
            problems.push(format!(
                "{at}: properties on a field of type {}",
                type_.unwrap_or_default()
            ));
        }
        if schema.contains_key("additionalProperties") {
            problems.push(format!(
                "{at}: properties and additionalProperties are mutually exclusive"
            ));
        }
        match props.as_object() {
            Some(props) => {
                for (name, sub) in props {
                    child(sub, &format!("{path}.{name}"), in_junctor, problems);
                }
            }
            None => problems.push(format!("{at}: properties must be an object")),
        }
    }
    if let Some(extra) = schema.get("additionalProperties")
        && extra.is_object()
    {
        child(extra, &format!("{path}[*]"), in_junctor, problems);
    }
    match (type_, schema.get("items")) {
        (Some("array"), None) if !in_junctor => {
            problems.push(format!("{at}: an array needs items"))
        }
        (_, Some(items)) if items.is_array() => {
            problems.push(format!("{at}: items must be one schema, not a list"))
        }
        (_, Some(items)) => child(items, &format!("{path}[]"), in_junctor, problems),
        _ => {}
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        // The API server's own int-or-string pattern types its branches.
        let int_or_string = serde_json::json!([{"type": "integer"}, {"type": "string"}]);
        if flag("x-kubernetes-int-or-string") && schema.get(junctor) == Some(&int_or_string) {
            continue;
        }
        if let Some(list) = schema.get(junctor) {
            match list.as_array() {
                Some(list) => {
                    for (i, sub) in list.iter().enumerate() {
                        child(sub, &format!("{path}.{junctor}[{i}]"), true, problems);
                    }
                }
                None => problems.push(format!("{at}: {junctor} must be a list")),
            }
        }
    }
    if let Some(not) = schema.get("not") {
        child(not, &format!("{path}.not"), true, problems);
    }
}

fn child(value: &Value, path: &str, in_junctor: bool, problems: &mut Vec<String>) {
    match value.as_object() {
        Some(schema) => node(schema, path, in_junctor, problems),
        None => problems.push(format!("{path}: must be a schema object")),
    }
}

/// At the root, metadata may only constrain name and generateName.
fn metadata(meta: &Map<String, Value>, problems: &mut Vec<String>) {
    if let Some(props) = meta.get("properties").and_then(Value::as_object) {
        for name in props.keys() {
            if name != "name" && name != "generateName" {
                problems.push(format!(
                    ".metadata.{name}: only name and generateName may be constrained in metadata"
                ));
            }
        }
    }
    for key in meta.keys() {
        if !["type", "properties", "description"].contains(&key.as_str()) {
            problems.push(format!(".metadata: {key:?} is not allowed on metadata"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_typed_schema_is_structural() {
        let s = json!({"type": "object", "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "size": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "list": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                "mode": {"type": "string", "oneOf": [{"enum": ["a"]}, {"pattern": "^b"}]}
            }}
        }});
        assert_eq!(structural(&s), Vec::<String>::new());
    }

    #[test]
    fn each_violation_is_named_with_its_path() {
        let s = json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "spec": {"type": "object", "properties": {
                "untyped": {"description": "no type"},
                "ref": {"$ref": "#/definitions/x"},
                "list": {"type": "array"},
                "both": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
                "typo": {"type": "string", "patern": "x"},
                "junction": {"type": "string", "anyOf": [{"type": "string"}]}
            }}
        }});
        let problems = structural(&s).join("\n");
        for want in [
            ".metadata.labels: only name and generateName",
            ".spec.untyped: no type",
            ".spec.ref: keyword \"$ref\" is not allowed",
            ".spec.list: an array needs items",
            ".spec.both: properties and additionalProperties are mutually exclusive",
            ".spec.typo: keyword \"patern\" is not allowed",
            ".spec.junction.anyOf[0]: \"type\" is not allowed inside allOf/anyOf/oneOf/not",
        ] {
            assert!(problems.contains(want), "{want} in:\n{problems}");
        }
        assert!(structural(&json!({"type": "string"}))[0].contains("root must be of type object"));
    }
}
