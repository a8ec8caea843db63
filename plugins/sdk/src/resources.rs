//! Small builders for requirements and resource lists.

use crate::bindings::karpenter::provider::types::{Operator, Requirement};

/// `key In [values]`.
pub fn req_in<S: AsRef<str>>(key: &str, values: &[S]) -> Requirement {
    Requirement {
        key: key.to_string(),
        operator: Operator::In,
        values: values.iter().map(|v| v.as_ref().to_string()).collect(),
        min_values: None,
    }
}

/// A resource list from pairs, e.g. `resources(&[("cpu", "4".into())])`.
pub fn resources(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Mebibytes as a quantity string.
pub fn mib(n: u64) -> String {
    format!("{n}Mi")
}

/// Gibibytes as a quantity string.
pub fn gib(n: u64) -> String {
    format!("{n}Gi")
}

/// Milli-CPU as a quantity string.
pub fn millis(n: u64) -> String {
    if n.is_multiple_of(1000) {
        format!("{}", n / 1000)
    } else {
        format!("{n}m")
    }
}

/// The value of a label in a `(key, value)` list.
pub fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}
