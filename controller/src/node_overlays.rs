//! NodeOverlays (Karpenter's `NodeOverlay` feature gate, off by default):
//! watched once the gate is on, laid over every NodePool's catalog on each
//! provisioning and disruption pass (the engine decides how,
//! `engine::overlay`), and their status written: `ValidationSucceeded` and
//! `Ready`, False with reason `RuntimeValidation` for an overlay that cannot
//! be read and `Conflict` for one that overlaps another of its weight.

use crate::cluster::{self, Cluster};
use crate::conditions;
use crate::crds::NodeOverlay;
use engine::overlay::{self, OverlayPool, PriceChange};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

pub const STATUS_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct NodeOverlays {
    /// `None` while the gate is off.
    store: Option<Store<NodeOverlay>>,
    /// From the last pass: the overlays in conflict, and why.
    conflicts: Mutex<BTreeMap<String, String>>,
}

impl NodeOverlays {
    /// Watches NodeOverlays when `enabled`; otherwise overlays are ignored.
    pub fn start(client: &Client, cluster: &Cluster, enabled: bool) -> Self {
        if !enabled {
            return NodeOverlays::default();
        }
        let tx = cluster.provision.clone();
        let store = cluster::spawn(
            Api::<NodeOverlay>::all(client.clone()),
            cluster.lists,
            cluster::trim,
            move |e| {
                if let kube::runtime::watcher::Event::Apply(_)
                | kube::runtime::watcher::Event::Delete(_) = e
                {
                    let _ = tx.send(());
                }
            },
        );
        NodeOverlays {
            store: Some(store),
            conflicts: Mutex::default(),
        }
    }

    /// Waits for the first full list of overlays: a pass before it would
    /// launch at prices the overlays change.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        if let Some(store) = &self.store {
            store.wait_until_ready().await?;
        }
        Ok(())
    }

    /// Lays every valid overlay over the pools' catalogs.
    pub fn apply(&self, mut pools: Vec<&mut engine::NodePool>) {
        let Some(store) = &self.store else {
            return;
        };
        let overlays: Vec<overlay::NodeOverlay> =
            store.state().iter().filter_map(|o| read(o).ok()).collect();
        if overlays.is_empty() {
            self.lock().clear();
            return;
        }
        *self.lock() = lay_over(&mut pools, &overlays);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.conflicts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes each overlay's conditions as the last pass found it.
    pub async fn run_status(&self, client: Client) {
        let Some(store) = &self.store else {
            return;
        };
        let mut tick = tokio::time::interval(STATUS_INTERVAL);
        loop {
            tick.tick().await;
            let conflicts = self.lock().clone();
            for o in store.state() {
                if let Err(e) = write_status(&client, &o, &conflicts).await {
                    tracing::warn!(nodeoverlay = %o.name_any(), error = format!("{e:#}"), "nodeoverlay status");
                }
            }
        }
    }
}

/// Lays `overlays` over the pools' catalogs; returns the overlays in
/// conflict, and why.
pub fn lay_over(
    pools: &mut [&mut engine::NodePool],
    overlays: &[overlay::NodeOverlay],
) -> BTreeMap<String, String> {
    let out = {
        let views: Vec<OverlayPool> = pools
            .iter()
            .map(|p| &**p)
            .map(|p| OverlayPool {
                name: &p.name,
                labels: &p.labels,
                types: &p.instance_types,
            })
            .collect();
        overlay::apply(&views, overlays)
    };
    for (pool, types) in pools.iter_mut().zip(out.pools) {
        if let Some(types) = types {
            pool.instance_types = types.into();
        }
    }
    out.conflicts
}

/// An overlay as the engine takes it, or why it cannot be read (what
/// Karpenter reports as a runtime validation failure).
pub fn read(o: &NodeOverlay) -> Result<overlay::NodeOverlay, String> {
    let spec = &o.spec;
    let requirements = spec
        .requirements
        .iter()
        .map(|r| {
            let operator: engine::Operator = r
                .operator
                .parse()
                .map_err(|e| format!("requirement {}: {e}", r.key))?;
            if matches!(operator, engine::Operator::In | engine::Operator::NotIn)
                && r.values.is_empty()
            {
                return Err(format!(
                    "key {} with operator {operator} must have a value defined",
                    r.key
                ));
            }
            Ok(engine::Requirement {
                key: r.key.clone(),
                operator,
                values: r.values.clone(),
                min_values: None,
            })
        })
        .collect::<Result<_, String>>()?;
    let price = match (&spec.price, &spec.price_adjustment) {
        (Some(_), Some(_)) => return Err("cannot set both 'price' and 'priceAdjustment'".into()),
        (Some(p), None) => Some(PriceChange::parse_price(p)?),
        (None, Some(a)) => Some(PriceChange::parse_adjustment(a)?),
        (None, None) => None,
    };
    let mut capacity = engine::ResourceList::new();
    for (name, q) in spec.capacity.iter().flatten() {
        if matches!(
            name.as_str(),
            "cpu" | "memory" | "ephemeral-storage" | "pods"
        ) {
            return Err(format!("invalid capacity: {name} in resource, restricted"));
        }
        let amount =
            engine::parse_resource(name, &q.0).map_err(|e| format!("capacity {name}: {e}"))?;
        capacity.insert(name.clone(), amount);
    }
    Ok(overlay::NodeOverlay {
        name: o.name_any(),
        weight: spec.weight.unwrap_or(0),
        requirements,
        price,
        capacity,
    })
}

async fn write_status(
    client: &Client,
    o: &NodeOverlay,
    conflicts: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let before = o.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let (state, reason, message) = match (read(o), conflicts.get(&o.name_any())) {
        (Err(why), _) => ("False", "RuntimeValidation", why),
        (Ok(_), Some(why)) => ("False", "Conflict", why.clone()),
        (Ok(_), None) => ("True", "ValidationSucceeded", String::new()),
    };
    let generation = o.metadata.generation;
    for type_ in ["ValidationSucceeded", "Ready"] {
        let reason = if state == "True" { type_ } else { reason };
        conditions::set(
            &mut status.conditions,
            type_,
            state,
            reason,
            &message,
            generation,
        );
    }
    if conditions::same(&before.conditions, &status.conditions) {
        return Ok(());
    }
    Api::<NodeOverlay>::all(client.clone())
        .patch_status(
            &o.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": status})),
        )
        .await?;
    Ok(())
}
