//! CRDs for the NodeClass kinds that plugins serve, built from what a plugin
//! declares about each kind (`node-class-kind` in the contract): group,
//! version, kind, plural, short names and the OpenAPI schema of the object.

use anyhow::{Context, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_runtime::wit::NodeClassKind;

/// The cluster-scoped CRD of one NodeClass kind: one served and stored
/// version, the status subresource, in the `karpenter` category (as
/// karpenter.sh's own kinds), with a Ready column when the status has
/// conditions, and Age.
pub fn crd(kind: &NodeClassKind) -> anyhow::Result<CustomResourceDefinition> {
    let schema: serde_json::Value = serde_json::from_str(&kind.schema)
        .with_context(|| format!("the schema of {} is not JSON", kind.kind))?;
    ensure!(
        schema.get("type").and_then(|t| t.as_str()) == Some("object"),
        "the schema of {} must be of type object",
        kind.kind
    );
    let has_conditions = schema
        .pointer("/properties/status/properties/conditions")
        .is_some();
    let schema: JSONSchemaProps = serde_json::from_value(schema)
        .with_context(|| format!("the schema of {} is not an OpenAPI v3 schema", kind.kind))?;
    let column = |name: &str, type_: &str, json_path: &str| CustomResourceColumnDefinition {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        ..Default::default()
    };
    let mut columns = Vec::new();
    if has_conditions {
        columns.push(column(
            "Ready",
            "string",
            r#".status.conditions[?(@.type=="Ready")].status"#,
        ));
    }
    columns.push(column("Age", "date", ".metadata.creationTimestamp"));
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{}", kind.plural, kind.group)),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: kind.group.clone(),
            names: CustomResourceDefinitionNames {
                kind: kind.kind.clone(),
                list_kind: Some(format!("{}List", kind.kind)),
                plural: kind.plural.clone(),
                singular: Some(kind.kind.to_ascii_lowercase()),
                short_names: (!kind.short_names.is_empty()).then(|| kind.short_names.clone()),
                categories: Some(vec!["karpenter".into()]),
            },
            scope: "Cluster".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: kind.version.clone(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                subresources: Some(CustomResourceSubresources {
                    status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                    scale: None,
                }),
                additional_printer_columns: Some(columns),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(schema: &str) -> NodeClassKind {
        NodeClassKind {
            group: "karpenter.example.com".into(),
            version: "v1alpha1".into(),
            kind: "ExampleNodeClass".into(),
            plural: "examplenodeclasses".into(),
            short_names: vec!["enc".into()],
            schema: schema.into(),
        }
    }

    #[test]
    fn names_scope_status_and_columns_come_from_the_kind() {
        let schema = r#"{"type":"object","properties":{"spec":{"type":"object"},
            "status":{"type":"object","properties":{"conditions":{"type":"array",
            "items":{"type":"object"}}}}}}"#;
        let crd = crd(&kind(schema)).expect("builds");
        let v = serde_json::to_value(&crd).expect("serializes");
        assert_eq!(
            v["metadata"]["name"],
            "examplenodeclasses.karpenter.example.com"
        );
        assert_eq!(v["spec"]["scope"], "Cluster");
        assert_eq!(v["spec"]["names"]["singular"], "examplenodeclass");
        assert_eq!(v["spec"]["names"]["listKind"], "ExampleNodeClassList");
        assert_eq!(v["spec"]["names"]["shortNames"], serde_json::json!(["enc"]));
        let version = &v["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(columns, ["Ready", "Age"]);
        assert_eq!(
            version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
                ["type"],
            "array"
        );
    }

    #[test]
    fn no_ready_column_without_conditions_and_bad_schemas_fail() {
        let crd = crd(&kind(r#"{"type":"object"}"#)).expect("builds");
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .as_ref()
            .expect("columns");
        assert_eq!(columns.len(), 1);
        assert!(super::crd(&kind("not json")).is_err());
        assert!(super::crd(&kind(r#"{"type":"string"}"#)).is_err());
    }
}
