//! The contract's values as JSON in the contract's own names, for `plugin
//! call`: a provider author reads `provider-id` and `type` and `running` in
//! the WIT, so the output says the same, not the Rust bindings' `type_` and
//! `Running`.

use serde_json::Value;

/// Record fields whose values are WIT enums (by their field name in the
/// contract): `operator`, `effect`, `state`, `status`.
const ENUM_FIELDS: [&str; 4] = ["operator", "effect", "state", "status"];

/// `value` (serialized from the bindings) with record fields and enum cases
/// in WIT's kebab-case.
pub fn to_wit_names(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, v)| {
                    let key = field_name(&key);
                    let v = match v {
                        Value::String(s) if ENUM_FIELDS.contains(&key.as_str()) => {
                            Value::String(kebab(&s))
                        }
                        v => to_wit_names(v),
                    };
                    (key, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(to_wit_names).collect()),
        v => v,
    }
}

/// A Rust field name as WIT spells it: `provider_id` is `provider-id`,
/// `type_` (a keyword escaped) is `type`.
fn field_name(rust: &str) -> String {
    rust.trim_end_matches('_').replace('_', "-")
}

/// A Rust enum case as WIT spells it: `NotIn` is `not-in`.
fn kebab(case: &str) -> String {
    let mut out = String::with_capacity(case.len() + 4);
    for (i, c) in case.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_and_enum_cases_take_the_contracts_names() {
        let rust = json!({
            "provider_id": "kwok://a",
            "state": "Running",
            "conditions": [{"type_": "Ready", "status": "False", "reason": "NotReady"}],
            "requirements": [{"key": "zone", "operator": "NotIn", "values": ["Running"]}],
            "labels": [["state", "Running"]],
        });
        assert_eq!(
            to_wit_names(rust),
            json!({
                "provider-id": "kwok://a",
                "state": "running",
                "conditions": [{"type": "Ready", "status": "false", "reason": "NotReady"}],
                "requirements": [{"key": "zone", "operator": "not-in", "values": ["Running"]}],
                "labels": [["state", "Running"]],
            })
        );
    }
}
