//! The Nebius provider (as in AKS Flex): NebiusNodeClass, instance types from
//! the project's platform presets, and instances with their boot disks
//! launched through the Nebius gRPC API, joining the cluster over WireGuard
//! or Unbounded CNI with a kubelet bootstrap token. Without the credentials
//! secret granted (an offline `simulate`), instance types come from a
//! built-in platform table; everything else still needs the API.
//!
//! Code map: `proto` (the API messages we use), `grpc` (framing and status
//! over the SDK's HTTP client), `auth` (credentials, JWT, cached tokens),
//! `nodeclass`, `catalog` (types, prices, overhead), `builtin` (the
//! embedded platform table), `bootstrap`
//! (cloud-init), `wireguard` (addresses and their reservation), `instance`
//! (the contract's view of an instance) are pure and tested natively;
//! `settings`, `cloud` and `launch` call the host; this file wires them.
//!
//! Capabilities it needs: HTTP to the compute and IAM endpoints, the
//! credentials secret, the cache (token, platforms, unavailable offerings,
//! WireGuard reservations) and the cluster view (endpoint, CA, Node IPs).

#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

pub mod auth;
pub mod bootstrap;
pub mod builtin;
pub mod catalog;
mod cloud;
pub mod grpc;
pub mod instance;
mod launch;
pub mod nodeclass;
pub mod proto;
mod settings;
pub mod wireguard;

use catalog::{Prices, Shape, Shaping};
use cloud::{Cloud, failure};
use karpenter_plugin_sdk::prelude::*;
use prost::Message;
use settings::Settings;

struct Nebius;

/// Projects seen in NodeClasses, for the calls that get no NodeClass.
const PROJECT_PREFIX: &str = "project/";
const PLATFORMS_TTL_SECONDS: u64 = 300;
pub const UNAVAILABLE_TTL_SECONDS: u64 = 180;

pub fn unavailable_key(instance_type: &str, zone: &str, capacity_type: &str) -> String {
    format!("unavailable/{instance_type}/{zone}/{capacity_type}")
}

fn condition(type_: &str, ok: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        },
        reason: reason.into(),
        message,
    }
}

fn parse_class(class: &NodeClass) -> Result<nodeclass::Spec, Error> {
    ensure_kind(class, nodeclass::GROUP, nodeclass::KIND)?;
    let spec = nodeclass::parse(&class.json).map_err(fatal)?;
    if !spec.project_id.is_empty() {
        // Remember where to look when a call brings no NodeClass.
        cache::set(
            &format!("{PROJECT_PREFIX}{}", spec.project_id),
            spec.region.as_bytes(),
            0,
        );
    }
    Ok(spec)
}

fn prices(s: &Settings) -> Result<&Prices, Error> {
    s.prices
        .as_ref()
        .map_err(|e| fatal(format!("the PRICES setting: {e}")))
}

/// The project's platforms, cached for a few minutes.
fn platforms(cloud: &Cloud, project: &str) -> Result<Vec<proto::Platform>, Error> {
    let key = format!("platforms/{project}");
    if let Some(bytes) = cache::get(&key)
        && let Ok(r) = proto::ListPlatformsResponse::decode(bytes.as_slice())
    {
        return Ok(r.items);
    }
    let items = cloud
        .platforms(project)
        .map_err(|e| failure(&format!("listing the platforms of {project}"), &e))?;
    let encoded = proto::ListPlatformsResponse {
        items: items.clone(),
        next_page_token: String::new(),
    }
    .encode_to_vec();
    cache::set(&key, &encoded, PLATFORMS_TTL_SECONDS);
    Ok(items)
}

fn is_unavailable(t: &str, z: &str, ct: &str) -> bool {
    cache::get(&unavailable_key(t, z, ct)).is_some()
}

fn instance_types(
    s: &Settings,
    cloud: &Cloud,
    spec: &nodeclass::Spec,
) -> Result<(Vec<Shape>, Vec<InstanceType>), Error> {
    types_of(s, spec, &platforms(cloud, &spec.project_id)?)
}

fn types_of(
    s: &Settings,
    spec: &nodeclass::Spec,
    platforms: &[proto::Platform],
) -> Result<(Vec<Shape>, Vec<InstanceType>), Error> {
    let shapes = catalog::shapes(platforms);
    let prices = prices(s)?;
    let shaping = Shaping {
        region: &spec.region,
        max_pods: spec.max_pods,
        os_disk_size_gb: spec.os_disk_size_gb,
        prices,
    };
    let types = shapes
        .iter()
        .map(|sh| catalog::instance_type(sh, &shaping, &is_unavailable))
        .collect();
    Ok((shapes, types))
}

/// How often the built-in table's warning repeats, per region.
const BUILTIN_WARNING_TTL_SECONDS: u64 = 3600;

/// Instance types from the built-in platform table, for a plugin without
/// credentials: a plan can still be made, but it may name presets the
/// project lacks and its prices are not the project's.
fn builtin_instance_types(
    s: &Settings,
    spec: &nodeclass::Spec,
) -> Result<Vec<InstanceType>, Error> {
    let platforms = builtin::embedded(&spec.region)
        .map_err(|e| fatal(format!("the built-in platform table: {e}")))?;
    let warned = format!("builtin/warned/{}", spec.region);
    if cache::get(&warned).is_none() {
        let date = builtin::compiled(builtin::PLATFORMS_CSV).unwrap_or("an unknown date");
        karpenter_plugin_sdk::log::warn(
            &format!(
                "no Nebius credentials granted: instance types come from the built-in catalog of {date}; prices are estimates"
            ),
            &[("region", &spec.region), ("secret", &s.credentials_secret)],
        );
        cache::set(&warned, b"", BUILTIN_WARNING_TTL_SECONDS);
    }
    Ok(types_of(s, spec, &platforms)?.1)
}

/// Until a project is known (after a restart, before the NodeClasses are
/// validated) the plugin cannot tell which instances exist: it says so
/// rather than answer "none" or not-found.
const NO_PROJECT_YET: &str = "no Nebius project known yet: set NEBIUS_PROJECT_ID or wait for the NebiusNodeClass to validate";

/// Projects to look in: the setting, then every project a NodeClass named.
/// An error until there is one.
fn projects_to_search(s: &Settings) -> Result<Vec<(String, String)>, Error> {
    let projects = known_projects(s);
    if projects.is_empty() {
        return Err(retryable(NO_PROJECT_YET));
    }
    Ok(projects)
}

/// Projects to look in: the setting, then every project a NodeClass named.
fn known_projects(s: &Settings) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = cache::keys(PROJECT_PREFIX)
        .into_iter()
        .filter_map(|k| {
            let project = k.strip_prefix(PROJECT_PREFIX)?.to_string();
            let region = String::from_utf8(cache::get(&k)?).ok()?;
            Some((project, region))
        })
        .collect();
    if let Some(p) = &s.project_id
        && !out.iter().any(|(q, _)| q == p)
    {
        out.insert(0, (p.clone(), String::new()));
    }
    out
}

/// The instance as the contract sees it, sized from the cached platforms.
fn view(cloud: &Cloud, project: &str, region: &str, i: &proto::Instance) -> Instance {
    let shapes = platforms(cloud, project)
        .map(|p| catalog::shapes(&p))
        .unwrap_or_default();
    let name = instance::type_name(i);
    let shape = shapes.iter().find(|sh| sh.name == name);
    instance::to_wit(i, region, shape, 110, 128)
}

fn ours(s: &Settings, i: &proto::Instance) -> bool {
    instance::label(i, instance::LABEL_CLUSTER) == Some(s.cluster_name.as_str())
        && instance::label(i, instance::LABEL_NODECLAIM).is_some()
}

impl Guest for Nebius {
    fn metadata() -> ProviderMetadata {
        ProviderMetadata {
            name: "nebius".into(),
            provider_id_schemes: vec![instance::SCHEME.into()],
            node_classes: vec![NodeClassKind {
                group: nodeclass::GROUP.into(),
                version: nodeclass::VERSION.into(),
                kind: nodeclass::KIND.into(),
                plural: "nebiusnodeclasses".into(),
                short_names: vec!["nebiusnc".into()],
                schema: include_str!("nodeclass.schema.json").into(),
            }],
        }
    }

    fn validate_node_class(class: NodeClass) -> Result<NodeClassStatus, Error> {
        let s = Settings::load();
        let spec = parse_class(&class)?;
        let problems = nodeclass::validate(&spec);
        let valid = problems.is_empty();
        let wireguard_ok = match spec.wireguard() {
            Ok(Some(_)) => !s.hub_endpoint.is_empty() && !s.hub_public_key.is_empty(),
            _ => true,
        };
        let prices_ok = s.prices.is_ok();
        let ready = valid && wireguard_ok && prices_ok;
        let mut conditions = vec![
            condition(
                "ValidationSucceeded",
                valid,
                if valid {
                    "ValidationSucceeded"
                } else {
                    "ValidationFailed"
                },
                problems.join("; "),
            ),
            condition(
                "WireGuardReady",
                wireguard_ok,
                if wireguard_ok {
                    "WireGuardReady"
                } else {
                    "HubNotConfigured"
                },
                if wireguard_ok {
                    String::new()
                } else {
                    "wireguardPeerCIDR is set: set WIREGUARD_HUB_ENDPOINT and WIREGUARD_HUB_PUBLIC_KEY".into()
                },
            ),
        ];
        if let Err(e) = &s.prices {
            conditions.push(condition("PricesReady", false, "InvalidPrices", e.clone()));
        }
        conditions.push(condition(
            "Ready",
            ready,
            if ready { "Ready" } else { "NotReady" },
            String::new(),
        ));
        let resolved = match spec.wireguard() {
            Ok(Some(c)) => serde_json::json!({"wireguardAddresses": c.usable()}),
            _ => serde_json::json!({}),
        };
        Ok(NodeClassStatus {
            conditions,
            resolved: resolved.to_string(),
        })
    }

    fn get_instance_types(_pool: NodePool, class: NodeClass) -> Result<Vec<InstanceType>, Error> {
        let s = Settings::load();
        let spec = parse_class(&class)?;
        if spec.project_id.is_empty() {
            return Err(node_class_not_ready("spec.projectID is required"));
        }
        if !cloud::credentials_granted(&s) {
            return builtin_instance_types(&s, &spec);
        }
        let cloud = Cloud::connect(&s)?;
        Ok(instance_types(&s, &cloud, &spec)?.1)
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<Instance, Error> {
        launch::create(&claim, &class)
    }

    fn delete(claim: NodeClaim) -> Result<(), Error> {
        let s = Settings::load();
        let cloud = Cloud::connect(&s)?;
        for (project, _) in &projects_to_search(&s)? {
            // The instance first; its boot disk once the instance is gone.
            if let Some(i) = cloud
                .instance_by_name(project, &claim.name)
                .map_err(|e| failure("looking up the instance", &e))?
            {
                let id = i
                    .metadata
                    .as_ref()
                    .map(|m| m.id.clone())
                    .unwrap_or_default();
                let deleting = i
                    .status
                    .as_ref()
                    .is_some_and(|st| st.state == proto::state::DELETING);
                if !deleting {
                    let _: proto::Operation = cloud
                        .call(
                            proto::paths::INSTANCE_DELETE,
                            &proto::DeleteInstanceRequest { id: id.clone() },
                            Some(&format!("delete-{id}")),
                        )
                        .or_else(|e| {
                            if e.is_not_found() {
                                Ok(Default::default())
                            } else {
                                Err(e)
                            }
                        })
                        .map_err(|e| failure("deleting the instance", &e))?;
                    karpenter_plugin_sdk::log::info(
                        "deleting instance",
                        &[("nodeclaim", &claim.name), ("instance", &id)],
                    );
                }
                return Ok(());
            }
            let disk = instance::boot_disk_name(&claim.name);
            if let Some(d) = cloud
                .disk_by_name(project, &disk)
                .map_err(|e| failure("looking up the boot disk", &e))?
            {
                let id = d
                    .metadata
                    .as_ref()
                    .map(|m| m.id.clone())
                    .unwrap_or_default();
                let _: proto::Operation = cloud
                    .call(
                        proto::paths::DISK_DELETE,
                        &proto::DeleteDiskRequest { id: id.clone() },
                        Some(&format!("delete-{id}")),
                    )
                    .or_else(|e| {
                        if e.is_not_found() {
                            Ok(Default::default())
                        } else {
                            Err(e)
                        }
                    })
                    .map_err(|e| failure("deleting the boot disk", &e))?;
                return Ok(());
            }
        }
        wireguard::release(&launch::CacheStore, &claim.name);
        Err(not_found(format!(
            "no instance or boot disk for NodeClaim {}",
            claim.name
        )))
    }

    fn get(provider_id: String) -> Result<Instance, Error> {
        let s = Settings::load();
        let claim = instance::claim_of(&provider_id)
            .ok_or_else(|| not_found(format!("{provider_id} is not a Nebius providerID")))?;
        let projects = projects_to_search(&s)?;
        let cloud = Cloud::connect(&s)?;
        for (project, region) in projects {
            if let Some(i) = cloud
                .instance_by_name(&project, claim)
                .map_err(|e| failure("looking up the instance", &e))?
            {
                return Ok(view(&cloud, &project, &region, &i));
            }
        }
        Err(not_found(format!("no instance for {provider_id}")))
    }

    fn list_instances() -> Result<Vec<Instance>, Error> {
        let s = Settings::load();
        let projects = projects_to_search(&s)?;
        let cloud = Cloud::connect(&s)?;
        let mut out = Vec::new();
        for (project, region) in projects {
            let instances: Vec<proto::Instance> = cloud
                .instances(&project)
                .map_err(|e| failure("listing instances", &e))?
                .into_iter()
                .filter(|i| ours(&s, i))
                .collect();
            let names: Vec<&str> = instances
                .iter()
                .filter_map(|i| instance::label(i, instance::LABEL_NODECLAIM))
                .collect();
            let disks = cloud
                .disks(&project)
                .map_err(|e| failure("listing disks", &e))?;
            let orphans: Vec<Instance> = disks
                .iter()
                .filter_map(|d| instance::orphan_disk(d, &s.cluster_name, &names))
                .collect();
            out.extend(instances.iter().map(|i| view(&cloud, &project, &region, i)));
            out.extend(orphans);
        }
        Ok(out)
    }

    fn is_drifted(_claim: NodeClaim, _class: NodeClass) -> Result<Option<String>, Error> {
        Ok(None)
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        [ConditionStatus::False, ConditionStatus::Unknown]
            .into_iter()
            .map(|condition_status| RepairPolicy {
                condition_type: "Ready".into(),
                condition_status,
                toleration_seconds: 10 * 60,
            })
            .collect()
    }
}

/// No compact catalog: the catalog is built per call, so get-instance-types is cheaper.
/// No notice before the cloud takes an instance.
impl Interruption for Nebius {}

impl CompactCatalog for Nebius {}

// Natively (unit tests, the emulator) there is no component to export into.
#[cfg(target_arch = "wasm32")]
karpenter_plugin_sdk::export!(Nebius);
