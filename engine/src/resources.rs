//! Resource names as dense indexes and resource vectors.
//!
//! `cpu`, `memory`, `pods` and `ephemeral-storage` always come first; other
//! names follow sorted, so vectors are short and comparisons are plain loops.

use std::collections::BTreeSet;

use crate::snapshot::ResourceList;
use vocabulary::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, NODES, PODS};

pub(crate) const POD_SLOT: usize = 2;

#[derive(Debug, Clone)]
pub(crate) struct ResourceNames {
    names: Vec<String>,
}

impl ResourceNames {
    pub(crate) fn new<'a>(all: impl IntoIterator<Item = &'a ResourceList>) -> Self {
        let fixed = [CPU, MEMORY, PODS, EPHEMERAL_STORAGE];
        let mut extra = BTreeSet::new();
        for list in all {
            for name in list.keys() {
                if !fixed.contains(&name.as_str()) && name != NODES {
                    extra.insert(name.clone());
                }
            }
        }
        let names = fixed.iter().map(|s| s.to_string()).chain(extra).collect();
        ResourceNames { names }
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    pub(crate) fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Missing names are zero; `nodes` is not a resource here.
    pub(crate) fn vector(&self, list: &ResourceList) -> Vec<i64> {
        let mut v = vec![0; self.names.len()];
        for (name, amount) in list {
            if let Some(i) = self.index(name) {
                v[i] = *amount;
            }
        }
        v
    }

    /// Non-zero entries back as a list.
    pub(crate) fn list(&self, v: &[i64]) -> ResourceList {
        self.names
            .iter()
            .zip(v)
            .filter(|(_, a)| **a != 0)
            .map(|(n, a)| (n.clone(), *a))
            .collect()
    }

    /// Human form: `cpu 1500m`, `memory 4Gi`, `nvidia.com/gpu 2`.
    pub(crate) fn describe(&self, i: usize, amount: i64) -> String {
        format!(
            "{} {}",
            self.names[i],
            format_amount(&self.names[i], amount)
        )
    }
}

/// An amount in canonical units as a Kubernetes quantity: "1500m", "4Gi".
pub fn format_amount(name: &str, amount: i64) -> String {
    if name == CPU {
        if amount % 1000 == 0 {
            return (amount / 1000).to_string();
        }
        return format!("{amount}m");
    }
    if name == MEMORY || name == EPHEMERAL_STORAGE {
        for (unit, size) in [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
            if amount != 0 && amount % size == 0 {
                return format!("{}{unit}", amount / size);
            }
        }
    }
    amount.to_string()
}

pub(crate) fn add(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_add(*y);
    }
}

pub(crate) fn sub(a: &mut [i64], b: &[i64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.saturating_sub(*y);
    }
}
