//! The kwok provider: a synthetic catalog whose "instances" are Node objects
//! created through the Kubernetes API, which kwok then keeps Ready. It is what
//! end-to-end and scale tests use when no cloud is involved.
//!
//! Capabilities it needs: HTTP to the cluster's API server (allowed hosts), the
//! cluster view (endpoint), and a bearer token granted as a secret (setting
//! `TOKEN_SECRET`, default `kube/token`).
//!
//! Other settings: `INSTANCE_TYPES`, a catalog in the JSON of Karpenter's own
//! kwok provider, served instead of the built-in one; `OUT_OF_CAPACITY`,
//! offerings whose launches fail with insufficient capacity; `RESERVATIONS`,
//! capacity reservations offered as reserved capacity (`reservations.rs`).
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod catalog;
mod karpenter_json;
mod nodes;
mod reservations;
mod stored;

use karpenter_plugin_sdk::catalog_table::{InstanceTypeTable, offerings, string, table};
use karpenter_plugin_sdk::prelude::*;

pub const GROUP: &str = "karpenter.kwok.sh";
const KIND: &str = "KWOKNodeClass";
pub const PROVIDER_ID_SCHEME: &str = "kwok";

struct Kwok;

impl Guest for Kwok {
    fn metadata() -> ProviderMetadata {
        ProviderMetadata {
            name: "kwok".into(),
            provider_id_schemes: vec![PROVIDER_ID_SCHEME.into()],
            node_classes: vec![NodeClassKind {
                group: GROUP.into(),
                version: "v1alpha1".into(),
                kind: KIND.into(),
                plural: "kwoknodeclasses".into(),
                short_names: vec![],
                schema: include_str!("nodeclass.schema.json").into(),
            }],
        }
    }

    fn validate_node_class(node_class: NodeClass) -> Result<NodeClassStatus, Error> {
        ensure_kind(&node_class, GROUP, KIND)?;
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

    fn get_instance_types(_pool: NodePool, class: NodeClass) -> Result<Vec<InstanceType>, Error> {
        ensure_kind(&class, GROUP, KIND)?;
        instance_types(None)?.collect()
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<Instance, Error> {
        ensure_kind(&class, GROUP, KIND)?;
        launch(&claim)
    }

    fn delete(claim: NodeClaim) -> Result<(), Error> {
        let name = match &claim.provider_id {
            Some(id) => nodes::name_from_provider_id(id)?,
            None => claim.name.clone(),
        };
        nodes::delete(&name)
    }

    fn get(provider_id: String) -> Result<Instance, Error> {
        let name = nodes::name_from_provider_id(&provider_id)?;
        nodes::get(&name)?.ok_or_else(|| not_found(format!("node {name} does not exist")))
    }

    fn list_instances() -> Result<Vec<Instance>, Error> {
        nodes::list()
    }

    fn is_drifted(_claim: NodeClaim, _class: NodeClass) -> Result<Option<String>, Error> {
        Ok(None)
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        vec![RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: ConditionStatus::False,
            toleration_seconds: 30 * 60,
        }]
    }
}

/// The catalog (only the types of `name`, if given), one type at a time,
/// with its reservations and with the offerings that recently failed marked
/// unavailable. The setting INSTANCE_TYPES, when present, holds a catalog in
/// the JSON of Karpenter's kwok provider, each type parsed as it is reached;
/// otherwise the built-in synthetic one. A type named is read from the cache
/// when it is stored there.
fn instance_types(
    name: Option<&str>,
) -> Result<impl Iterator<Item = Result<InstanceType, Error>> + '_, Error> {
    let adjust = adjustments()?;
    let base: Types<'_> = match name.and_then(stored::named) {
        Some(Ok(types)) => Box::new(types.into_iter().map(Ok)),
        Some(Err(e)) => Box::new(std::iter::once(Err(e))),
        None => configured_types(name)?,
    };
    Ok(base.map(move |it| Ok(adjust(it.map_err(fatal)?))))
}

type Types<'a> = Box<dyn Iterator<Item = Result<InstanceType, String>> + 'a>;

/// The catalog's types (of `name`, if given) as configured: INSTANCE_TYPES,
/// or the synthetic catalog.
fn configured_types(name: Option<&str>) -> Result<Types<'_>, Error> {
    Ok(match imported_index() {
        Some(index) => {
            let index = index.as_ref().map_err(|e| fatal(e.clone()))?;
            match name {
                Some(name) => Box::new(index.named(name)),
                None => Box::new(index.each()),
            }
        }
        None => Box::new(
            synthetic()
                .iter()
                .filter(move |it| name.is_none_or(|n| it.name == n))
                .cloned()
                .map(Ok),
        ),
    })
}

/// What a type of the catalog becomes as offered now: with its reservations,
/// and its offerings that recently failed marked unavailable.
fn adjustments() -> Result<impl Fn(InstanceType) -> InstanceType, Error> {
    let reserved = reservations::configured()?;
    let left = reservations::left(reserved)?;
    let unavailable = cache::keys("unavailable/");
    Ok(move |mut it: InstanceType| {
        reservations::add_offerings(&mut it, reserved, &left);
        for o in &mut it.offerings {
            let key = catalog::unavailable_key(&it.name, &o.zone, &o.capacity_type);
            if unavailable.binary_search(&key).is_ok() {
                o.available = false;
            }
        }
        it
    })
}

/// No notice before the cloud takes an instance.
impl Interruption for Kwok {}

/// The tables are built once per instance; each call copies them and marks
/// what recently failed. Reservations' counts change with every launch, so
/// with reservations there are no tables kept ready.
impl CompactCatalog for Kwok {
    fn get_table(_pool: NodePool, class: NodeClass) -> Result<Option<InstanceTypeTable>, Error> {
        ensure_kind(&class, GROUP, KIND)?;
        if !reservations::configured()?.is_empty() {
            return Ok(None);
        }
        static TABLE: std::sync::OnceLock<Result<InstanceTypeTable, String>> =
            std::sync::OnceLock::new();
        let base = TABLE
            .get_or_init(|| match imported_index() {
                Some(Ok(index)) => Ok(table(&index.each().collect::<Result<Vec<_>, _>>()?)),
                Some(Err(e)) => Err(e.clone()),
                None => Ok(table(synthetic())),
            })
            .as_ref()
            .map_err(|e| fatal(e.clone()))?;
        let mut out = base.clone();
        let unavailable = cache::keys("unavailable/");
        if !unavailable.is_empty() {
            for it in &base.instance_types {
                let name = string(base, it.name);
                let start = it.offerings.start as usize;
                for (i, o) in offerings(base, it).iter().enumerate() {
                    let key = catalog::unavailable_key(
                        name,
                        string(base, o.zone),
                        string(base, o.capacity_type),
                    );
                    if unavailable.binary_search(&key).is_ok() {
                        out.offerings[start + i].available = false;
                    }
                }
            }
        }
        Ok(Some(out))
    }
}

/// The built-in catalog, built once per instance.
fn synthetic() -> &'static [InstanceType] {
    static SYNTHETIC: std::sync::OnceLock<Vec<InstanceType>> = std::sync::OnceLock::new();
    SYNTHETIC.get_or_init(|| {
        catalog::shapes()
            .iter()
            .map(catalog::instance_type)
            .collect()
    })
}

/// The INSTANCE_TYPES setting, read once per instance: instances are reused
/// and the setting only changes with a reload, which starts fresh ones.
fn imported_json() -> Option<&'static str> {
    static JSON: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    JSON.get_or_init(|| config::get_setting("INSTANCE_TYPES"))
        .as_deref()
}

/// Where each type of the INSTANCE_TYPES catalog is, found once per instance;
/// an instance that reads the catalog stores its types in the cache when no
/// other has.
fn imported_index() -> Option<&'static Result<karpenter_json::Index<'static>, String>> {
    static INDEX: std::sync::OnceLock<Option<Result<karpenter_json::Index<'static>, String>>> =
        std::sync::OnceLock::new();
    INDEX
        .get_or_init(|| {
            let index = imported_json().map(karpenter_json::Index::of);
            if let Some(Ok(index)) = &index {
                stored::store(index);
            }
            index
        })
        .as_ref()
}

/// The first type the claim lists (the host lists them cheapest first, at
/// the prices its NodeOverlays may have changed) with an available offering
/// the claim allows, and that type's cheapest such offering; by this
/// provider's prices when the claim lists no types. Only the listed types
/// are read, one by one: an unlisted type never meets the claim's
/// instance-type requirement.
fn cheapest_fit(claim: &NodeClaim) -> Result<Option<(InstanceType, Offering)>, Error> {
    let listed = listed_types(claim);
    if !listed.is_empty() {
        for name in listed {
            for it in instance_types(Some(name))? {
                let it = it?;
                if let Some(offering) = cheapest_offering_of(claim, &it).cloned() {
                    return Ok(Some((it, offering)));
                }
            }
        }
        return Ok(None);
    }
    let mut best: Option<(InstanceType, Offering)> = None;
    for it in instance_types(None)? {
        let it = it?;
        let Some(offering) = cheapest_offering_of(claim, &it) else {
            continue;
        };
        if best.as_ref().is_none_or(|(_, b)| offering.price < b.price) {
            let offering = offering.clone();
            best = Some((it, offering));
        }
    }
    Ok(best)
}

/// The setting OUT_OF_CAPACITY lists offerings (`type/zone/capacity-type`,
/// comma separated) whose launches fail with insufficient capacity.
fn simulated_out_of_capacity(instance_type: &str, zone: &str, capacity_type: &str) -> bool {
    let wanted = format!("{instance_type}/{zone}/{capacity_type}");
    config::get_setting("OUT_OF_CAPACITY")
        .is_some_and(|list| list.split(',').any(|item| item.trim() == wanted))
}

// Natively (unit tests) there is no component to export into.
#[cfg(target_arch = "wasm32")]
karpenter_plugin_sdk::export!(Kwok);

/// Makes the Node for `claim` on the cheapest offering it fits. Idempotent
/// without a read first: the Node's create answers 409 when an earlier
/// attempt made it, and a launch refused before it creates anything looks
/// for such a Node before it says so.
fn launch(claim: &NodeClaim) -> Result<Instance, Error> {
    let refused = |e: Error| match nodes::get(&claim.name) {
        Ok(Some(existing)) => Ok(existing),
        _ => Err(e),
    };
    let Some((it, offering)) = cheapest_fit(claim)? else {
        return refused(insufficient_capacity(
            format!("no available offering satisfies nodeclaim {}", claim.name),
            vec![],
        ));
    };
    // Offerings configured as out of capacity fail here, as a cloud would,
    // and are remembered as unavailable so the next batch picks another.
    if simulated_out_of_capacity(&it.name, &offering.zone, &offering.capacity_type)
        || reservations::of(&offering).is_some() && !offering.available
    {
        let key = catalog::unavailable_key(&it.name, &offering.zone, &offering.capacity_type);
        cache::set(&key, b"", 180);
        return refused(insufficient_capacity(
            format!(
                "{} in {} ({}) is out of capacity",
                it.name, offering.zone, offering.capacity_type
            ),
            vec![OfferingRef {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
            }],
        ));
    }
    let mut resolved = resolved_labels(&it, &offering);
    resolved.push((labels::HOSTNAME.into(), claim.name.clone()));
    let node_labels = node_labels(claim, resolved);
    let created = nodes::create(claim, &it, node_labels)?;
    if let Some(id) = reservations::of(&offering)
        && reservations::oversubscribed(id)?
    {
        nodes::delete(&claim.name)?;
        return Err(insufficient_capacity(
            format!("reservation {id} is full"),
            vec![OfferingRef {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type.clone(),
            }],
        ));
    }
    Ok(created)
}
