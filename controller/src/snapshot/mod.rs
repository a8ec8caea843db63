//! Kubernetes objects and plugin results into the engine's `Snapshot`.
//!
//! Architecture Invariant: this is the only place that knows both shapes; the
//! engine never sees a Kubernetes type and the controller never builds engine
//! types by hand.

pub mod cluster;
pub mod disruption;
pub mod instance_types;
pub mod nodepools;
pub mod nodes;
pub mod pod_requests;
pub mod pods;

use anyhow::Context;
use engine::ResourceList;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// A Kubernetes resource list in the engine's canonical integer units.
pub fn resource_list(list: Option<&BTreeMap<String, Quantity>>) -> anyhow::Result<ResourceList> {
    let mut out = ResourceList::new();
    for (name, q) in list.into_iter().flatten() {
        let v = engine::parse_resource(name, &q.0).with_context(|| format!("resource {name}"))?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

/// Adds `b` into `a`, resource by resource.
pub fn add(a: &mut ResourceList, b: &ResourceList) {
    for (k, v) in b.iter() {
        *a.entry_or_insert_with(k, || 0) += v;
    }
}

/// The larger of `a` and `b`, resource by resource, into `a`.
pub fn max_into(a: &mut ResourceList, b: &ResourceList) {
    for (k, v) in b.iter() {
        let e = a.entry_or_insert_with(k, || 0);
        *e = (*e).max(*v);
    }
}

/// Kubernetes labels (or a selector's matchLabels) for the engine.
pub fn labels(map: Option<&BTreeMap<String, String>>) -> engine::Labels {
    map.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
