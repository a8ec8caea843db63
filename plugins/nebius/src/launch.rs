//! Create: the boot disk `<nodeclaim>-boot`, then the instance, each with an
//! idempotency key and its operation awaited. Idempotent by NodeClaim name:
//! an instance of that name is the answer; a disk of that name is reused.

use crate::bootstrap::{self, Bootstrap, WireGuard};
use crate::catalog::{self, Shape};
use crate::cloud::{Cloud, failure};
use crate::grpc::CallError;
use crate::instance::{self, boot_disk_name};
use crate::nodeclass::{self, Spec};
use crate::settings::Settings;
use crate::wireguard::{self, Cidr, ReserveError, Store};
use crate::{UNAVAILABLE_TTL_SECONDS, instance_types, parse_class, proto, unavailable_key};
use karpenter_plugin_sdk::log;
use karpenter_plugin_sdk::prelude::*;
use std::collections::HashSet;
use std::net::Ipv4Addr;

/// The host cache as the WireGuard reservation's store.
pub struct CacheStore;

impl Store for CacheStore {
    fn keys(&self, prefix: &str) -> Vec<String> {
        cache::keys(prefix)
    }
    fn set(&self, key: &str, ttl_seconds: u64) {
        cache::set(key, &[], ttl_seconds);
    }
    fn delete(&self, key: &str) {
        cache::delete(key);
    }
    fn pause(&self, millis: u64) {
        std::thread::sleep(std::time::Duration::from_millis(millis));
    }
}

fn offering_ref(it: &str, zone: &str, ct: &str) -> OfferingRef {
    OfferingRef {
        instance_type: it.into(),
        zone: zone.into(),
        capacity_type: ct.into(),
    }
}

pub fn create(claim: &NodeClaim, class: &NodeClass) -> Result<Instance, Error> {
    let s = Settings::load();
    let spec = parse_class(class)?;
    let problems = nodeclass::validate(&spec);
    if !problems.is_empty() {
        return Err(node_class_not_ready(problems.join("; ")));
    }
    let cidr = spec.wireguard().map_err(node_class_not_ready)?;
    if cidr.is_some() && (s.hub_endpoint.is_empty() || s.hub_public_key.is_empty()) {
        return Err(node_class_not_ready(
            "wireguardPeerCIDR is set: set WIREGUARD_HUB_ENDPOINT and WIREGUARD_HUB_PUBLIC_KEY",
        ));
    }
    let token = s.bootstrap_token.clone().ok_or_else(|| {
        create_error(
            "BootstrapTokenMissing",
            "set the KUBELET_BOOTSTRAP_TOKEN setting",
            false,
        )
    })?;
    let cloud = Cloud::connect(&s)?;
    let (shapes, types) = instance_types(&s, &cloud, &spec)?;

    // Idempotent by NodeClaim name: an existing instance is the answer.
    if let Some(i) = cloud
        .instance_by_name(&spec.project_id, &claim.name)
        .map_err(|e| failure("looking up the instance", &e))?
    {
        return Ok(to_wit(&i, &spec, &shapes));
    }

    let (it, offering) = offering_to_launch(claim, &types).ok_or_else(|| {
        insufficient_capacity(
            format!(
                "no available Nebius offering satisfies NodeClaim {}",
                claim.name
            ),
            vec![],
        )
    })?;
    let shape = shapes
        .iter()
        .find(|sh| sh.name == it.name)
        .ok_or_else(|| fatal(format!("{} is not a platform preset", it.name)))?;
    let capacity_type = offering.capacity_type.clone();
    let failed_offering = || offering_ref(&shape.name, &spec.region, &capacity_type);

    let address = match &cidr {
        Some(c) => Some(wireguard_address(
            &s,
            &cloud,
            &spec,
            c,
            claim,
            failed_offering(),
        )?),
        None => None,
    };
    let result = launch(
        &s,
        &cloud,
        &spec,
        claim,
        shape,
        &capacity_type,
        address,
        cidr,
        &token,
    );
    if result.is_err() {
        // A failed launch frees its address for the next one; a retried
        // create reserves again.
        wireguard::release(&CacheStore, &claim.name);
    }
    let i = result?;
    Ok(to_wit(&i, &spec, &shapes))
}

fn to_wit(i: &proto::Instance, spec: &Spec, shapes: &[Shape]) -> Instance {
    let name = instance::type_name(i);
    let shape = shapes.iter().find(|sh| sh.name == name);
    instance::to_wit(i, &spec.region, shape, spec.max_pods, spec.os_disk_size_gb)
}

/// A free WireGuard address for the claim, reserved against concurrent
/// launches (see `wireguard`).
fn wireguard_address(
    s: &Settings,
    cloud: &Cloud,
    spec: &Spec,
    cidr: &Cidr,
    claim: &NodeClaim,
    offering: OfferingRef,
) -> Result<Ipv4Addr, Error> {
    let mut in_use: HashSet<Ipv4Addr> = cluster::node_internal_ips()
        .iter()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    if let Some(hub) = s.hub_address.as_deref().and_then(|a| a.parse().ok()) {
        in_use.insert(hub);
    }
    for i in cloud
        .instances(&spec.project_id)
        .map_err(|e| failure("listing instances for their WireGuard addresses", &e))?
    {
        if let Some(ip) =
            instance::label(&i, instance::LABEL_WIREGUARD_ADDRESS).and_then(|a| a.parse().ok())
        {
            in_use.insert(ip);
        }
    }
    match wireguard::reserve(&CacheStore, cidr, &claim.name, &in_use) {
        Ok(ip) => Ok(ip),
        Err(e @ ReserveError::Exhausted { .. }) => {
            log::warn(&e.to_string(), &[("nodeclaim", &claim.name)]);
            Err(insufficient_capacity(e.to_string(), vec![offering]))
        }
        Err(e) => Err(create_error(
            "WireGuardAddressContended",
            e.to_string(),
            true,
        )),
    }
}

/// A creation failure: capacity and quota become insufficient capacity with
/// the offering marked unavailable in the host cache.
fn launch_failure(what: &str, e: &CallError, offering: OfferingRef) -> Error {
    if let Some(why) = e.capacity() {
        cache::set(
            &unavailable_key(
                &offering.instance_type,
                &offering.zone,
                &offering.capacity_type,
            ),
            b"1",
            UNAVAILABLE_TTL_SECONDS,
        );
        log::info(
            "offering unavailable",
            &[
                ("instance_type", &offering.instance_type),
                ("capacity_type", &offering.capacity_type),
                ("why", &why),
            ],
        );
        return insufficient_capacity(format!("{what}: {why}"), vec![offering]);
    }
    if e.transient() {
        return retryable(format!("{what}: {e}"));
    }
    let reason = match e {
        CallError::Status {
            detail: Some(d), ..
        } if !d.code.is_empty() => d.code.clone(),
        _ => "NebiusAPIError".into(),
    };
    create_error(reason, format!("{what}: {e}"), false)
}

#[allow(clippy::too_many_arguments)]
fn launch(
    s: &Settings,
    cloud: &Cloud,
    spec: &Spec,
    claim: &NodeClaim,
    shape: &Shape,
    capacity_type: &str,
    address: Option<Ipv4Addr>,
    cidr: Option<Cidr>,
    token: &str,
) -> Result<proto::Instance, Error> {
    let offering = || offering_ref(&shape.name, &spec.region, capacity_type);
    let disk_id = boot_disk(cloud, spec, claim, shape, &s.cluster_name)
        .map_err(|e| launch_failure("creating the boot disk", &e, offering()))?;

    let info = cluster::info();
    let mut resolved = catalog::labels(shape, &spec.region);
    resolved.push((labels::CAPACITY_TYPE.into(), capacity_type.into()));
    let node_labels = node_labels(claim, resolved);
    let taints: Vec<String> = node_taints(claim).iter().map(kubelet_taint).collect();
    let user_data = bootstrap::render(&Bootstrap {
        api_server: info.endpoint,
        ca_bundle: info.ca_bundle,
        bootstrap_token: token.into(),
        provider_id: instance::provider_id(&claim.name),
        labels: node_labels,
        taints,
        kube_reserved_cpu_millis: catalog::kube_reserved_cpu_millis(shape.vcpu),
        kube_reserved_memory_mib: catalog::kube_reserved_memory_mib(
            shape.memory_gib,
            spec.max_pods,
        ),
        max_pods: spec.max_pods,
        kubernetes_version: s.kubernetes_version.clone(),
        wireguard: address.zip(cidr).map(|(ip, c)| WireGuard {
            address: ip.to_string(),
            prefix: c.prefix(),
            peer_cidr: c.to_string(),
            hub_endpoint: s.hub_endpoint.clone(),
            hub_public_key: s.hub_public_key.clone(),
        }),
        ssh_public_key: s.ssh_public_key.clone(),
    });
    if user_data.len() > bootstrap::MAX_USER_DATA {
        return Err(create_error(
            "UserDataTooLarge",
            format!(
                "cloud-init is {} bytes, over Nebius's {}",
                user_data.len(),
                bootstrap::MAX_USER_DATA
            ),
            false,
        ));
    }

    let mut resource_labels = std::collections::HashMap::from([
        (instance::LABEL_NODECLAIM.to_string(), claim.name.clone()),
        (
            instance::LABEL_NODEPOOL.to_string(),
            claim.node_pool.clone(),
        ),
        (instance::LABEL_CLUSTER.to_string(), s.cluster_name.clone()),
        (
            instance::LABEL_CAPACITY_TYPE.to_string(),
            capacity_type.to_string(),
        ),
    ]);
    if let Some(ip) = address {
        resource_labels.insert(instance::LABEL_WIREGUARD_ADDRESS.into(), ip.to_string());
    }
    let request = proto::CreateInstanceRequest {
        metadata: Some(proto::ResourceMetadata {
            parent_id: spec.project_id.clone(),
            name: claim.name.clone(),
            labels: resource_labels,
            ..Default::default()
        }),
        spec: Some(proto::InstanceSpec {
            service_account_id: s.service_account_id.clone(),
            resources: Some(proto::ResourcesSpec {
                platform: shape.platform.clone(),
                preset: Some(shape.preset.clone()),
            }),
            network_interfaces: vec![proto::NetworkInterfaceSpec {
                subnet_id: spec.subnet_id.clone(),
                name: "eth0".into(),
                ip_address: Some(proto::IpAddress::default()),
                public_ip_address: spec.public_ip.then(proto::PublicIpAddress::default),
            }],
            boot_disk: Some(proto::AttachedDiskSpec {
                attach_mode: proto::ATTACH_READ_WRITE,
                existing_disk: Some(proto::ExistingDisk {
                    id: disk_id.clone(),
                }),
            }),
            cloud_init_user_data: user_data,
            // A failed VM is replaced by Karpenter, not recovered in place.
            recovery_policy: 1,
            preemptible: (capacity_type == labels::SPOT).then_some(proto::PreemptibleSpec {
                on_preemption: proto::PREEMPTION_STOP,
            }),
            hostname: String::new(),
        }),
    };
    let op: proto::Operation = cloud
        .call(
            proto::paths::INSTANCE_CREATE,
            &request,
            Some(&format!("{}-instance", claim.name)),
        )
        .map_err(|e| launch_failure("creating the instance", &e, offering()))?;
    let op = cloud.wait(op).map_err(|e| {
        // The instance never came up: its disk would only leak.
        delete_disk_quietly(cloud, &disk_id);
        launch_failure("creating the instance", &e, offering())
    })?;
    log::info(
        "instance created",
        &[
            ("nodeclaim", &claim.name),
            ("instance", &op.resource_id),
            ("type", &shape.name),
            ("capacity_type", capacity_type),
        ],
    );
    cloud
        .call(
            proto::paths::INSTANCE_GET,
            &proto::GetInstanceRequest {
                id: op.resource_id.clone(),
            },
            None,
        )
        .map_err(|e| failure("reading the new instance", &e))
}

/// The boot disk's id: the existing one of that name, or a new one, labelled
/// with its NodeClaim and cluster so a disk left without its instance can be
/// found and collected.
fn boot_disk(
    cloud: &Cloud,
    spec: &Spec,
    claim: &NodeClaim,
    shape: &Shape,
    cluster: &str,
) -> Result<String, CallError> {
    let name = boot_disk_name(&claim.name);
    if let Some(d) = cloud.disk_by_name(&spec.project_id, &name)?
        && let Some(m) = d.metadata
    {
        return Ok(m.id);
    }
    let request = proto::CreateDiskRequest {
        metadata: Some(proto::ResourceMetadata {
            parent_id: spec.project_id.clone(),
            name: name.clone(),
            labels: [
                (instance::LABEL_NODECLAIM.to_string(), claim.name.clone()),
                (instance::LABEL_CLUSTER.to_string(), cluster.to_string()),
            ]
            .into(),
            ..Default::default()
        }),
        spec: Some(proto::DiskSpec {
            size_gibibytes: Some(spec.os_disk_size_gb as i64),
            r#type: proto::DISK_TYPE_NETWORK_SSD,
            source_image_family: Some(proto::SourceImageFamily {
                image_family: spec.image_family(shape.gpus > 0).to_string(),
                parent_id: String::new(),
            }),
        }),
    };
    let op: proto::Operation = cloud.call(proto::paths::DISK_CREATE, &request, Some(&name))?;
    let op = cloud.wait(op)?;
    Ok(op.resource_id)
}

fn delete_disk_quietly(cloud: &Cloud, id: &str) {
    let r: Result<proto::Operation, CallError> = cloud.call(
        proto::paths::DISK_DELETE,
        &proto::DeleteDiskRequest { id: id.into() },
        Some(&format!("delete-{id}")),
    );
    if let Err(e) = r {
        log::warn(
            "deleting the boot disk of a failed launch",
            &[("disk", id), ("error", &e.to_string())],
        );
    }
}
