//! Prices of Karpenter's KWOK catalog, the one both controllers serve, so the
//! nodes left at the end are priced the same way for both.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

#[derive(Deserialize)]
struct Type {
    name: String,
    offerings: Vec<Offering>,
}

#[derive(Deserialize)]
struct Offering {
    #[serde(rename = "Price")]
    price: f64,
    #[serde(rename = "Requirements")]
    requirements: Vec<Requirement>,
}

#[derive(Deserialize)]
struct Requirement {
    key: String,
    values: Vec<String>,
}

/// (instance type, zone, capacity type) → $/h.
pub struct Prices(HashMap<(String, String, String), f64>);

impl Prices {
    pub fn load(path: &Path) -> Result<Prices> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let types: Vec<Type> = serde_json::from_str(&text).context("instance_types.json")?;
        let mut out = HashMap::new();
        for t in types {
            for o in t.offerings {
                let value = |key: &str| {
                    o.requirements
                        .iter()
                        .find(|r| r.key == key)
                        .and_then(|r| r.values.first().cloned())
                        .unwrap_or_default()
                };
                let key = (
                    t.name.clone(),
                    value("topology.kubernetes.io/zone"),
                    value("karpenter.sh/capacity-type"),
                );
                out.insert(key, o.price);
            }
        }
        Ok(Prices(out))
    }

    pub fn of(&self, instance_type: &str, zone: &str, capacity_type: &str) -> Option<f64> {
        self.0
            .get(&(
                instance_type.to_string(),
                zone.to_string(),
                capacity_type.to_string(),
            ))
            .copied()
    }
}
