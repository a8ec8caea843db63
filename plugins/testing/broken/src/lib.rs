//! An in-memory provider whose "cloud" is the host's `cache` capability (shared
//! by every instance of the plugin), so create, get, list and delete work for
//! real within one host. With no MODE setting it keeps the contract; each
//! MODE breaks one rule, for the conformance kit's tests:
//!
//! - `missing-label`: the type `large` does not define kubernetes.io/os;
//! - `negative-price`: the spot offering of `small` in zone-b costs -0.01 $/h;
//! - `not-idempotent`: every create launches a new instance, even for a
//!   NodeClaim that already has one;
//! - `wrong-type-on-get`: get answers with another instance type than was
//!   launched;
//! - `no-labels`: instances carry no labels;
//! - `allocatable-above-capacity`: an instance's allocatable memory is ten
//!   times its capacity;
//! - `bad-metadata`: its name is not a DNS label, so it does not load;
//! - `any-kind`: a NodeClass of any kind is Ready;
//! - `out-of-capacity`: every create fails with insufficient-capacity naming
//!   the offering it tried, as the contract asks;
//! - `out-of-capacity-unnamed`: the same, naming no offering;
//! - `catalog-differs`: get-catalog prices every offering a cent above what
//!   get-instance-types lists;
//! - `catalog-bad-index`: get-catalog names a string that is not there;
//! - `table-differs`: get-table prices every offering a cent above what
//!   get-instance-types lists;
//! - `table-bad-span`: get-table's first instance type has offerings past
//!   the end of the offerings table.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use karpenter_plugin_sdk::prelude::*;
use serde_json::{Value, json};

const SCHEME: &str = "broken";
const GROUP: &str = "test.karpenter.sh";
const KIND: &str = "BrokenNodeClass";
const ZONES: [&str; 2] = ["zone-a", "zone-b"];

struct Broken;

fn mode() -> String {
    config::get_setting("MODE").unwrap_or_default()
}

impl Guest for Broken {
    fn metadata() -> ProviderMetadata {
        ProviderMetadata {
            name: if mode() == "bad-metadata" {
                "Broken_Provider".into()
            } else {
                "broken".into()
            },
            provider_id_schemes: vec![SCHEME.into()],
            node_classes: vec![NodeClassKind {
                group: GROUP.into(),
                version: "v1".into(),
                kind: KIND.into(),
                plural: "brokennodeclasses".into(),
                short_names: vec![],
                schema: r#"{"type":"object","properties":{"spec":{"type":"object"}}}"#.into(),
            }],
        }
    }

    fn validate_node_class(c: NodeClass) -> Result<NodeClassStatus, Error> {
        if mode() != "any-kind" {
            ensure_kind(&c, GROUP, KIND)?;
        }
        Ok(NodeClassStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: ConditionStatus::True,
                reason: "Ready".into(),
                message: String::new(),
            }],
            resolved: "{}".into(),
        })
    }

    fn get_instance_types(_p: NodePool, _c: NodeClass) -> Result<Vec<InstanceType>, Error> {
        Ok(catalog(&mode()))
    }

    fn create(claim: NodeClaim, _c: NodeClass) -> Result<Instance, Error> {
        let mode = mode();
        if mode != "not-idempotent"
            && let Some(id) = cache::get(&format!("claim/{}", claim.name))
        {
            return load(&String::from_utf8_lossy(&id))
                .ok_or_else(|| retryable("the NodeClaim's instance vanished"));
        }
        let types = catalog(&mode);
        let (it, offering) = offering_to_launch(&claim, &types).ok_or_else(|| {
            insufficient_capacity(
                format!("no offering satisfies NodeClaim {}", claim.name),
                vec![],
            )
        })?;
        if mode.starts_with("out-of-capacity") {
            let tried = OfferingRef {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
            };
            let named = if mode == "out-of-capacity" {
                vec![tried]
            } else {
                vec![]
            };
            return Err(insufficient_capacity("the zone is out of capacity", named));
        }
        let n = cache::keys("instance/").len() + cache::keys("deleted/").len() + 1;
        let id = format!("{SCHEME}://{}-{n}", claim.name);
        let stored = json!({
            "nodeClaim": claim.name, "nodePool": claim.node_pool, "providerId": id,
            "instanceType": it.name, "zone": offering.zone, "capacityType": offering.capacity_type,
            "capacity": it.capacity,
        });
        cache::set(&format!("instance/{id}"), stored.to_string().as_bytes(), 0);
        cache::set(&format!("claim/{}", claim.name), id.as_bytes(), 0);
        load(&id).ok_or_else(|| retryable("the instance vanished"))
    }

    fn delete(claim: NodeClaim) -> Result<(), Error> {
        let id = match claim.provider_id {
            Some(id) => id,
            None => cache::get(&format!("claim/{}", claim.name))
                .map(|id| String::from_utf8_lossy(&id).into_owned())
                .ok_or_else(|| not_found(format!("NodeClaim {} has no instance", claim.name)))?,
        };
        if cache::get(&format!("instance/{id}")).is_none() {
            return Err(not_found(format!("{id} does not exist")));
        }
        cache::delete(&format!("instance/{id}"));
        cache::set(&format!("deleted/{id}"), b"", 0);
        if cache::get(&format!("claim/{}", claim.name)).as_deref() == Some(id.as_bytes()) {
            cache::delete(&format!("claim/{}", claim.name));
        }
        Ok(())
    }

    fn get(id: String) -> Result<Instance, Error> {
        let mut i = load(&id).ok_or_else(|| not_found(format!("{id} does not exist")))?;
        if mode() == "wrong-type-on-get" {
            i.instance_type = "large".into();
        }
        Ok(i)
    }

    fn list_instances() -> Result<Vec<Instance>, Error> {
        Ok(cache::keys("instance/")
            .iter()
            .filter_map(|k| load(k.trim_start_matches("instance/")))
            .collect())
    }

    fn is_drifted(_c: NodeClaim, _n: NodeClass) -> Result<Option<String>, Error> {
        Ok(None)
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        vec![]
    }
}

fn load(id: &str) -> Option<Instance> {
    let mut i = stored(id)?;
    match mode().as_str() {
        "no-labels" => i.labels.clear(),
        "allocatable-above-capacity" => {
            for (name, amount) in &mut i.allocatable {
                if name == "memory" {
                    *amount = amount.replace("Gi", "0Gi");
                }
            }
        }
        _ => {}
    }
    Some(i)
}

fn stored(id: &str) -> Option<Instance> {
    let bytes = cache::get(&format!("instance/{id}"))?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let capacity: Vec<(String, String)> = serde_json::from_value(v["capacity"].clone()).ok()?;
    Some(Instance {
        node_claim: s("nodeClaim"),
        node_pool: s("nodePool"),
        provider_id: s("providerId"),
        image_id: "none".into(),
        instance_type: s("instanceType"),
        zone: s("zone"),
        capacity_type: s("capacityType"),
        state: InstanceState::Running,
        labels: vec![
            (labels::INSTANCE_TYPE.into(), s("instanceType")),
            (labels::ZONE.into(), s("zone")),
            (labels::CAPACITY_TYPE.into(), s("capacityType")),
        ],
        allocatable: capacity.clone(),
        capacity,
        created_at: None,
    })
}

fn catalog(mode: &str) -> Vec<InstanceType> {
    [("small", 2, 4, 0.08), ("large", 8, 32, 0.4)]
        .into_iter()
        .map(|(name, cpu, gib_memory, price)| {
            let mut requirements = vec![
                req_in(labels::INSTANCE_TYPE, &[name]),
                req_in(labels::ARCH, &["amd64"]),
                req_in(labels::OS, &["linux"]),
                req_in(labels::ZONE, &ZONES),
                req_in(labels::CAPACITY_TYPE, &[labels::SPOT, labels::ON_DEMAND]),
            ];
            if mode == "missing-label" && name == "large" {
                requirements.retain(|r| r.key != labels::OS);
            }
            let mut offerings = Vec::new();
            for zone in ZONES {
                for (capacity_type, factor) in [(labels::ON_DEMAND, 1.0), (labels::SPOT, 0.5)] {
                    let negative = mode == "negative-price"
                        && name == "small"
                        && zone == "zone-b"
                        && capacity_type == labels::SPOT;
                    offerings.push(Offering {
                        zone: zone.into(),
                        capacity_type: capacity_type.into(),
                        price: if negative { -0.01 } else { price * factor },
                        available: true,
                        reservation_capacity: None,
                        requirements: vec![],
                    });
                }
            }
            InstanceType {
                name: name.into(),
                requirements,
                offerings,
                capacity: resources(&[
                    ("cpu", cpu.to_string()),
                    ("memory", gib(gib_memory)),
                    ("pods", "110".into()),
                ]),
                overhead: Overhead {
                    kube_reserved: resources(&[("cpu", "100m".into()), ("memory", mib(512))]),
                    system_reserved: vec![],
                    eviction_threshold: vec![],
                },
            }
        })
        .collect()
}

/// No notice before the cloud takes an instance.
impl Interruption for Broken {}

/// Compact catalogs only in the modes that break them.
impl CompactCatalog for Broken {
    fn get_table(
        p: NodePool,
        c: NodeClass,
    ) -> Result<Option<karpenter_plugin_sdk::catalog_table::InstanceTypeTable>, Error> {
        let mode = mode();
        if !mode.starts_with("table-") {
            return Ok(None);
        }
        let mut table =
            karpenter_plugin_sdk::catalog_table::table(&Self::get_instance_types(p, c)?);
        if mode == "table-differs" {
            for o in &mut table.offerings {
                o.price += 0.01;
            }
        } else if mode == "table-bad-span" {
            table.instance_types[0].offerings.len = table.offerings.len() as u32 + 1;
        }
        Ok(Some(table))
    }

    fn get_catalog(
        p: NodePool,
        c: NodeClass,
    ) -> Result<Option<karpenter_plugin_sdk::catalog::Catalog>, Error> {
        let mode = mode();
        if !mode.starts_with("catalog-") {
            return Ok(None);
        }
        let mut catalog = karpenter_plugin_sdk::catalog::compact(&Self::get_instance_types(p, c)?);
        if mode == "catalog-differs" {
            for it in &mut catalog.instance_types {
                for o in &mut it.offerings {
                    o.price += 0.01;
                }
            }
        } else if mode == "catalog-bad-index" {
            catalog.instance_types[0].name = catalog.strings.len() as u32;
        }
        Ok(Some(catalog))
    }
}

// Natively (unit tests) there is no component to export into.
#[cfg(target_arch = "wasm32")]
karpenter_plugin_sdk::export!(Broken);
