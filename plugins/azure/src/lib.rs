//! The Azure provider: AKSNodeClass, instance types from VM SKUs and prices,
//! and VMs (with their NICs) launched through ARM REST into the cluster's node
//! resource group, joining the cluster with a kubelet bootstrap token.
//!
//! Code map: `catalog` (sizes, prices, instance types), `overhead` (what a
//! node reserves), `nodeclass` (spec, images, hash, drift), `kubelet`
//! (kubelet flags and Linux OS settings of the AKSNodeClass), `armerrors`
//! (error bodies, capacity failures), `bootstrap` (customData), `vm` (ARM
//! bodies, providerIDs, offering choice) are pure and tested natively;
//! `settings`, `arm` and `refresh` call the host; this file wires them.
//!
//! Capabilities it needs: HTTP to the ARM endpoint (and prices.azure.com for
//! live prices), `tokens: true` unless `ARM_AUTH=none`, the cache, the cluster
//! view (API server endpoint and CA for the bootstrap script).

#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

mod arm;
pub mod armerrors;
pub mod bootstrap;
pub mod catalog;
pub mod kubelet;
pub mod nodeclass;
pub mod overhead;
mod quota;
mod refresh;
pub mod reservations;
mod settings;
pub mod vm;

use arm::Arm;
use armerrors::{ArmError, CapacityFailure, Reason};
use catalog::Shaping;
use karpenter_plugin_sdk::prelude::*;
use serde_json::{Value, json};
use settings::Settings;

struct Azure;

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

fn shaping(s: &Settings, spec: &nodeclass::Spec) -> Shaping {
    Shaping {
        region: s.location.clone(),
        max_pods: spec.max_pods.unwrap_or_else(|| s.default_max_pods()),
        os_disk_size_gb: spec.os_disk_size_gb,
        vm_memory_overhead: s.vm_memory_overhead,
    }
}

fn parse_class(class: &NodeClass) -> Result<(nodeclass::Spec, Value), Error> {
    ensure_kind(class, nodeclass::GROUP, nodeclass::KIND)?;
    nodeclass::parse(&class.json).map_err(fatal)
}

/// Instance types built from one catalog and shaping, every offering
/// available. An instance serves many calls; rebuilding per call is what
/// made get-instance-types slow.
struct Built {
    region: String,
    texts: refresh::Texts,
    shaping: Shaping,
    skus: Vec<catalog::Sku>,
    types: Vec<InstanceType>,
}

static BUILT: std::sync::Mutex<Option<Built>> = std::sync::Mutex::new(None);

/// The region's instance types for this NodeClass, with unavailable offerings
/// from the host cache.
fn instance_types(s: &Settings, spec: &nodeclass::Spec) -> Catalog {
    let texts = refresh::texts(s);
    let shaping = shaping(s, spec);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let fresh = built
        .as_ref()
        .is_some_and(|b| b.region == s.location && b.texts == texts && b.shaping == shaping);
    if !fresh {
        let (skus, prices) = refresh::parse(&s.location, &texts);
        let types = skus
            .iter()
            .map(|k| catalog::instance_type(k, &shaping, &prices, &|_| false))
            .collect();
        *built = Some(Built {
            region: s.location.clone(),
            texts,
            shaping,
            skus,
            types,
        });
    }
    let Some(b) = built.as_ref() else {
        return Catalog {
            skus: Vec::new(),
            types: Vec::new(),
            held: Vec::new(),
        };
    };
    let mut types = b.types.clone();
    let unavailable = cache::keys("unavailable/");
    if !unavailable.is_empty() {
        for t in &mut types {
            for o in &mut t.offerings {
                let key = catalog::unavailable_key(&t.name, &o.zone, &o.capacity_type);
                o.available = unavailable
                    .binary_search_by(|k| k.as_str().cmp(&key))
                    .is_err();
            }
        }
    }
    if let Some(id) = spec.capacity_reservation_group.as_deref()
        && let Some(group) = reservations::GroupId::parse(id)
    {
        match reservations::current(s, &group) {
            Ok(rs) => reservations::add_offerings(
                &mut types,
                &reservations::label_value(&group.name),
                &rs,
            ),
            Err(e) => karpenter_plugin_sdk::log::warn(
                "capacity reservation group unreadable; no reserved offerings",
                &[("error", &e)],
            ),
        }
    }
    // Quota last: an offering is out while its VM would not fit the quota.
    // A reserved VM draws on quota the reservation holds already.
    let mut held = Vec::new();
    if let Some(q) = quota::current(s) {
        for (i, (t, sku)) in types.iter_mut().zip(&b.skus).enumerate() {
            for (j, o) in t
                .offerings
                .iter_mut()
                .enumerate()
                .filter(|(_, o)| o.available && o.capacity_type != labels::RESERVED)
            {
                if let Some(why) = q.shortfall(sku, o.capacity_type == labels::SPOT) {
                    o.available = false;
                    held.push(Held {
                        instance_type: i,
                        offering: j,
                        why,
                    });
                }
            }
        }
    }
    Catalog {
        skus: b.skus.clone(),
        types,
        held,
    }
}

/// The region's SKUs and their instance types as offered now.
struct Catalog {
    skus: Vec<catalog::Sku>,
    types: Vec<InstanceType>,
    /// Offerings that would be available but for the quota.
    held: Vec<Held>,
}

struct Held {
    instance_type: usize,
    offering: usize,
    why: String,
}

impl Catalog {
    /// What to launch for the NodeClaim, as indexes of the type (and its
    /// SKU, in the same order) and of the offering.
    fn choose(&self, claim: &NodeClaim) -> Result<(usize, usize), Error> {
        let Some((it, offering)) = offering_to_launch(claim, &self.types) else {
            return Err(self.quota_refusal(claim).unwrap_or_else(|| {
                let out = self.exhausted(claim);
                let named: Vec<String> = out
                    .iter()
                    .map(|o| format!("{} in {} ({})", o.instance_type, o.zone, o.capacity_type))
                    .collect();
                insufficient_capacity(
                    format!(
                        "no available offering satisfies NodeClaim {}; unavailable: {}",
                        claim.name,
                        if named.is_empty() {
                            "none".to_string()
                        } else {
                            named.join(", ")
                        }
                    ),
                    out,
                )
            }));
        };
        let i = self.types.iter().position(|t| std::ptr::eq(t, it));
        let o = it.offerings.iter().position(|x| std::ptr::eq(x, offering));
        i.zip(o)
            .filter(|&(i, _)| self.skus.get(i).is_some_and(|k| k.name == it.name))
            .ok_or_else(|| fatal(format!("{} is not in the catalog", it.name)))
    }

    /// The unavailable offerings the NodeClaim would launch on were they
    /// available (a full reservation, one that just failed): what an
    /// `insufficient-capacity` names.
    fn exhausted(&self, claim: &NodeClaim) -> Vec<OfferingRef> {
        self.types
            .iter()
            .filter_map(|t| {
                let mut freed = t.clone();
                for o in &mut freed.offerings {
                    o.available = true;
                }
                let o = cheapest_offering_of(claim, &freed)?;
                Some(OfferingRef {
                    instance_type: t.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                })
            })
            .collect()
    }

    /// Takes the offerings of one capacity kind (spot or on-demand) of type
    /// `i` out, as the quota holds them back.
    fn hold(&mut self, i: usize, spot: bool, why: String) {
        for (j, o) in self.types[i].offerings.iter_mut().enumerate() {
            if o.available
                && o.capacity_type != labels::RESERVED
                && (o.capacity_type == labels::SPOT) == spot
            {
                o.available = false;
                self.held.push(Held {
                    instance_type: i,
                    offering: j,
                    why: why.clone(),
                });
            }
        }
    }

    /// When quota alone keeps the NodeClaim from launching: the error that
    /// says which quota, naming the offerings it holds back.
    fn quota_refusal(&self, claim: &NodeClaim) -> Option<Error> {
        let mut freed = self.types.clone();
        for h in &self.held {
            freed[h.instance_type].offerings[h.offering].available = true;
        }
        let (it, _) = offering_to_launch(claim, &freed)?;
        let i = freed.iter().position(|t| t.name == it.name)?;
        let why = &self.held.iter().find(|h| h.instance_type == i)?.why;
        let refs = self
            .held
            .iter()
            .filter(|h| cheapest_offering_of(claim, &freed[h.instance_type]).is_some())
            .map(|h| {
                let o = &freed[h.instance_type].offerings[h.offering];
                OfferingRef {
                    instance_type: freed[h.instance_type].name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                }
            })
            .collect();
        Some(insufficient_capacity(
            format!("NodeClaim {} is over quota: {why}", claim.name),
            refs,
        ))
    }
}

/// The CapacityReservationGroupReady condition and the group's reservations,
/// when the NodeClass names a group.
fn reservation_group_status(s: &Settings, spec: &nodeclass::Spec) -> Option<(Condition, Value)> {
    const TYPE: &str = "CapacityReservationGroupReady";
    let id = spec.capacity_reservation_group.as_deref()?;
    let not_ready = |reason: &str, message: String| {
        Some((condition(TYPE, false, reason, message), json!({"id": id})))
    };
    let Some(group) = reservations::GroupId::parse(id) else {
        return not_ready(
            "InvalidGroupID",
            format!("{id:?} is not an ARM capacity reservation group id"),
        );
    };
    if let Some(sub) = &s.subscription
        && !sub.eq_ignore_ascii_case(&group.subscription)
    {
        return not_ready(
            "SubscriptionMismatch",
            format!("the group must be in the cluster's subscription {sub}"),
        );
    }
    match reservations::current(s, &group) {
        Err(e) if e.contains("NotFound") => not_ready("GroupNotFound", e),
        Err(e) => not_ready("GroupUnreadable", e),
        Ok(rs) if rs.is_empty() => not_ready(
            "NoReservations",
            format!(
                "capacity reservation group {} holds no reservation",
                group.name
            ),
        ),
        Ok(rs) => {
            let members: Vec<Value> = rs
                .iter()
                .map(|r| {
                    json!({"name": r.name, "vmSize": r.vm_size, "zone": r.zone,
                           "capacity": r.capacity, "allocated": r.allocated})
                })
                .collect();
            let message = rs
                .iter()
                .map(|r| {
                    format!(
                        "{} {} in {}: {} of {} left",
                        r.name,
                        r.vm_size,
                        r.zone,
                        r.left(),
                        r.capacity
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            Some((
                condition(TYPE, true, TYPE, message),
                json!({"id": id, "label": reservations::label_value(&group.name), "reservations": members}),
            ))
        }
    }
}

/// A failed create under its reason, with ARM's code and message.
fn arm_failure(what: &str, e: &ArmError) -> Error {
    let reason = Reason::of(e);
    create_error(reason.name(e), format!("{what}: {e}"), reason.retryable(e))
}

impl Guest for Azure {
    fn metadata() -> ProviderMetadata {
        ProviderMetadata {
            name: "azure".into(),
            provider_id_schemes: vec!["azure".into()],
            node_classes: vec![NodeClassKind {
                group: nodeclass::GROUP.into(),
                version: nodeclass::VERSION.into(),
                kind: nodeclass::KIND.into(),
                plural: "aksnodeclasses".into(),
                short_names: vec!["aksnc".into(), "aksncs".into()],
                schema: include_str!("nodeclass.schema.json").into(),
            }],
        }
    }

    fn validate_node_class(class: NodeClass) -> Result<NodeClassStatus, Error> {
        let s = Settings::load();
        let (spec, _) = parse_class(&class)?;
        let problems = nodeclass::validate(&spec, s.subnet_id.as_deref());
        let subnet = spec.vnet_subnet_id.clone().or(s.subnet_id.clone());
        let subnet_ok = subnet.as_deref().is_some_and(nodeclass::is_subnet_id);
        let version_ok = s.kubernetes_version.split('.').count() == 3;
        let images_ok = ["Ubuntu", "Ubuntu2204", "Ubuntu2404", "AzureLinux"]
            .contains(&spec.image_family.as_str());
        let valid = problems.is_empty();
        let group = reservation_group_status(&s, &spec);
        let group_ok = group
            .as_ref()
            .is_none_or(|(c, _)| c.status == ConditionStatus::True);
        let ready = valid && subnet_ok && version_ok && images_ok && group_ok;
        let mut conditions = vec![
            condition(
                "ImagesReady",
                images_ok,
                if images_ok {
                    "ImagesReady"
                } else {
                    "ImagesNotFound"
                },
                String::new(),
            ),
            condition(
                "KubernetesVersionReady",
                version_ok,
                if version_ok {
                    "KubernetesVersionReady"
                } else {
                    "InvalidVersion"
                },
                s.kubernetes_version.clone(),
            ),
            condition(
                "SubnetsReady",
                subnet_ok,
                if subnet_ok {
                    "SubnetsReady"
                } else {
                    "SubnetNotFound"
                },
                if subnet_ok {
                    String::new()
                } else {
                    "set spec.vnetSubnetID or the VNET_SUBNET_ID setting to an ARM subnet id".into()
                },
            ),
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
                "Ready",
                ready,
                if ready { "Ready" } else { "NotReady" },
                String::new(),
            ),
        ];
        let mut resolved = json!({
            "kubernetesVersion": s.kubernetes_version,
            "images": nodeclass::images(&spec, &s.kubernetes_version, &s.image_version),
        });
        if let Some((c, members)) = group {
            conditions.insert(0, c);
            resolved["capacityReservationGroup"] = members;
        }
        Ok(NodeClassStatus {
            conditions,
            resolved: resolved.to_string(),
        })
    }

    fn get_instance_types(_pool: NodePool, class: NodeClass) -> Result<Vec<InstanceType>, Error> {
        let s = Settings::load();
        let (spec, _) = parse_class(&class)?;
        Ok(instance_types(&s, &spec).types)
    }

    fn create(claim: NodeClaim, class: NodeClass) -> Result<Instance, Error> {
        let s = Settings::load();
        let (spec, _) = parse_class(&class)?;
        let problems = nodeclass::validate(&spec, s.subnet_id.as_deref());
        if !problems.is_empty() {
            return Err(node_class_not_ready(problems.join("; ")));
        }
        let sub = s.require("AZURE_SUBSCRIPTION_ID", &s.subscription)?;
        let rg = s.require("AZURE_NODE_RESOURCE_GROUP", &s.node_resource_group)?;
        let subnet = spec
            .vnet_subnet_id
            .clone()
            .or(s.subnet_id.clone())
            .ok_or_else(|| {
                node_class_not_ready("no subnet: set spec.vnetSubnetID or VNET_SUBNET_ID")
            })?;
        let token = s.require("KUBELET_BOOTSTRAP_TOKEN", &s.bootstrap_token)?;
        let arm = Arm::new(&s)?;
        let name = vm::resource_name(&claim.name);
        let vm_url = vm::vm_url(&sub, &rg, &name);
        let nic_url = vm::nic_url(&sub, &rg, &name);
        let mut offered = instance_types(&s, &spec);
        let shaping = shaping(&s, &spec);

        // Idempotent by NodeClaim name: an existing VM is the answer.
        let existing = arm.send("GET", &vm_url, None)?;
        if existing.is_success() {
            let v: Value = existing.json()?;
            let size = v
                .pointer("/properties/hardwareProfile/vmSize")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return Ok(vm::instance(
                &v,
                &sub,
                &rg,
                &s.location,
                offered.skus.iter().find(|k| k.name == size),
                &shaping,
            ));
        }

        // The chosen size's vCPUs are held in the quota before anything is
        // created, so that launches running at once do not all count on the
        // same room; a size the quota turns out not to have room for is
        // passed over for the next.
        // A reserved VM draws on the reservation's quota.
        let (index, held_quota) = loop {
            let (i, o) = offered.choose(&claim)?;
            let capacity_type = &offered.types[i].offerings[o].capacity_type;
            if capacity_type == labels::RESERVED {
                break ((i, o), None);
            }
            let spot = capacity_type == labels::SPOT;
            match quota::reserve(&s, &name, &offered.skus[i], spot) {
                Ok(held) => break ((i, o), Some(held)),
                Err(why) => offered.hold(i, spot, why),
            }
        };
        let skus = &offered.skus;
        let it = &offered.types[index.0];
        let offering = &it.offerings[index.1];
        let sku = &skus[index.0];
        let spot = offering.capacity_type == labels::SPOT;
        let reservation_group = (offering.capacity_type == labels::RESERVED)
            .then_some(spec.capacity_reservation_group.as_deref())
            .flatten();
        let provider_id = vm::provider_id(&sub, &rg, &name);

        let mut tags = serde_json::Map::new();
        for (k, v) in &spec.tags {
            tags.insert(k.clone(), json!(v));
        }
        tags.insert(vm::TAG_CLUSTER.into(), json!(s.cluster_name));
        tags.insert(vm::TAG_NODEPOOL.into(), json!(claim.node_pool));
        tags.insert(vm::TAG_NODECLAIM.into(), json!(claim.name));
        tags.insert(vm::TAG_BILLING.into(), json!("linux"));
        let tags = Value::Object(tags);

        // The node's labels: the type's single-valued labels, the offering's,
        // the NodeClaim's.
        let scope = if offering.zone == catalog::REGIONAL_ZONE {
            catalog::REGIONAL
        } else {
            catalog::ZONAL
        };
        let mut resolved = resolved_labels(it, offering);
        resolved.push((labels::REGION.into(), s.location.clone()));
        resolved.push((catalog::LABEL_PLACEMENT_SCOPE.into(), scope.into()));
        resolved.push((
            "kubernetes.azure.com/cluster".into(),
            s.cluster_name.clone(),
        ));
        let node_labels = node_labels(&claim, resolved);
        let taints: Vec<String> = node_taints(&claim).iter().map(kubelet_taint).collect();

        let info = cluster::info();
        let image_id = nodeclass::image_id(
            &spec.image_family,
            &s.kubernetes_version,
            &s.image_version,
            spec.fips(),
        );
        let script = bootstrap::render(&bootstrap::Bootstrap {
            node_name: name.clone(),
            api_server: info.endpoint,
            ca_bundle: info.ca_bundle,
            bootstrap_token: token,
            provider_id: provider_id.clone(),
            labels: node_labels,
            taints,
            kube_reserved_cpu_millis: overhead::kube_reserved_cpu_millis(sku.vcpu),
            kube_reserved_memory_mib: overhead::kube_reserved_memory_mib(
                sku.memory_mib(),
                shaping.max_pods,
            ),
            max_pods: shaping.max_pods,
            kubernetes_version: s.kubernetes_version.clone(),
            // Validated above.
            kubelet_flags: spec.kubelet_flags.clone().unwrap_or_default(),
            linux_os_config: spec.linux_os_config.clone().unwrap_or_default(),
            gpu_driver: sku.is_gpu().then_some(spec.gpu_driver),
        });

        // NIC first; the VM references it.
        let nic = vm::nic_body(&s.location, &subnet, sku.accelerated_networking, &tags);
        let r = arm
            .send("PUT", &nic_url, Some(&nic))
            .map_err(|e| in_create(&arm, &format!("create NIC {name}"), e))?;
        if !r.is_success() {
            return Err(arm_failure(
                "create NIC",
                &ArmError::from_body(r.status, &r.body),
            ));
        }
        let forced_vm_url = format!("{vm_url}&forceDeletion=true");
        match arm.wait(&r) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(arm_failure("create NIC", &e)),
            Err(e) => {
                // Named before the clean-up's requests replace ARM's answer.
                let e = in_create(&arm, &format!("create NIC {name}"), e);
                cleanup(&arm, &forced_vm_url, &nic_url);
                return Err(e);
            }
        }
        let nic_id = vm::nic_path(&sub, &rg, &name);
        let security = spec
            .raw
            .pointer("/security/encryptionAtHost")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let body = vm::vm_body(&vm::VmRequest {
            location: &s.location,
            name: &name,
            sku,
            zone_label: &offering.zone,
            spot,
            image_id: &image_id,
            os_disk_size_gb: spec.os_disk_size_gb,
            nic_id: &nic_id,
            custom_data: &bootstrap::base64(script.as_bytes()),
            ssh_public_key: &s.ssh_public_key,
            tags: &tags,
            encryption_at_host: security,
            identities: &s.node_identities,
            capacity_reservation_group: reservation_group,
        });
        // Past this point a failure must not leave the NIC (or a VM that ARM
        // created before failing) behind: both are ours alone.
        let sent = arm.send("PUT", &vm_url, Some(&body)).and_then(|r| {
            if r.is_success() {
                arm.wait(&r).map(Result::err)
            } else {
                Ok(Some(ArmError::from_body(r.status, &r.body)))
            }
        });
        let failure = match sent {
            Ok(failure) => failure,
            Err(e) => {
                // Throttled or failing past every retry: clean up (best
                // effort; garbage collection catches a VM that remains).
                let e = in_create(&arm, &format!("create VM {name}"), e);
                cleanup(&arm, &forced_vm_url, &nic_url);
                return Err(e);
            }
        };
        if let Some(e) = failure {
            // A failed VM and its NIC are ours alone; leave nothing behind
            // (best effort: garbage collection catches what remains).
            cleanup(&arm, &forced_vm_url, &nic_url);
            if let Some(kind) = CapacityFailure::classify(&e) {
                if kind.is_quota() {
                    quota::invalidate(&s);
                }
                let affected = armerrors::affected(
                    kind,
                    sku,
                    &offering.zone,
                    &offering.capacity_type,
                    &s.location,
                    skus,
                );
                for (t, z, ct) in &affected {
                    cache::set(
                        &catalog::unavailable_key(t, z, ct),
                        e.code.as_bytes(),
                        kind.ttl_seconds(),
                    );
                }
                karpenter_plugin_sdk::log::info(
                    "offerings marked unavailable",
                    &[
                        ("code", &e.code),
                        ("count", &affected.len().to_string()),
                        ("instance-type", &sku.name),
                        ("zone", &offering.zone),
                    ],
                );
                let refs = affected
                    .into_iter()
                    .map(|(instance_type, zone, capacity_type)| OfferingRef {
                        instance_type,
                        zone,
                        capacity_type,
                    })
                    .collect();
                return Err(insufficient_capacity(
                    format!(
                        "{}: {} in {} ({}): {}",
                        Reason::Capacity(kind).name(&e),
                        sku.name,
                        offering.zone,
                        offering.capacity_type,
                        e
                    ),
                    refs,
                ));
            }
            return Err(arm_failure("create VM", &e));
        }
        if let Some(held) = held_quota {
            held.keep();
        }
        if reservation_group.is_some() {
            reservations::invalidate();
        }
        let got = arm.send("GET", &vm_url, None)?;
        if !got.is_success() {
            return Err(retryable(format!(
                "VM {name} created but not readable: {}",
                ArmError::from_body(got.status, &got.body)
            )));
        }
        let v: Value = got.json()?;
        Ok(vm::instance(
            &v,
            &sub,
            &rg,
            &s.location,
            Some(sku),
            &shaping,
        ))
    }

    fn delete(claim: NodeClaim) -> Result<(), Error> {
        let s = Settings::load();
        let (sub, rg, name) = match claim.provider_id.as_deref().and_then(vm::parse_provider_id) {
            Some(parts) => parts,
            None => (
                s.require("AZURE_SUBSCRIPTION_ID", &s.subscription)?,
                s.require("AZURE_NODE_RESOURCE_GROUP", &s.node_resource_group)?,
                vm::resource_name(&claim.name),
            ),
        };
        let arm = Arm::new(&s)?;
        let vm_url = format!("{}&forceDeletion=true", vm::vm_url(&sub, &rg, &name));
        let nic_url = vm::nic_url(&sub, &rg, &name);
        let mut gone = 0;
        for (what, url) in [("VM", &vm_url), ("NIC", &nic_url)] {
            let r = arm.send("DELETE", url, None)?;
            match r.status {
                404 | 204 => gone += 1,
                s if (200..300).contains(&s) => {
                    if let Err(e) = arm.wait(&r)? {
                        return Err(retryable(format!("delete {what} {name}: {e}")));
                    }
                }
                _ => {
                    return Err(retryable(format!(
                        "delete {what} {name}: {}",
                        ArmError::from_body(r.status, &r.body)
                    )));
                }
            }
        }
        // What a reservation has left may have grown.
        reservations::invalidate();
        if gone == 2 {
            return Err(not_found(format!("VM and NIC {name} are gone")));
        }
        Ok(())
    }

    fn get(provider_id: String) -> Result<Instance, Error> {
        let s = Settings::load();
        let (sub, rg, name) = vm::parse_provider_id(&provider_id)
            .ok_or_else(|| fatal(format!("providerID {provider_id:?} is not an Azure VM id")))?;
        let arm = Arm::new(&s)?;
        let r = arm.send("GET", &vm::vm_url(&sub, &rg, &name), None)?;
        match r.status {
            404 => Err(not_found(format!("VM {name} does not exist"))),
            st if (200..300).contains(&st) => {
                let v: Value = r.json()?;
                Ok(instance_of(&s, &v, &sub, &rg))
            }
            _ => Err(retryable(format!(
                "get VM {name}: {}",
                ArmError::from_body(r.status, &r.body)
            ))),
        }
    }

    fn list_instances() -> Result<Vec<Instance>, Error> {
        let s = Settings::load();
        let sub = s.require("AZURE_SUBSCRIPTION_ID", &s.subscription)?;
        let rg = s.require("AZURE_NODE_RESOURCE_GROUP", &s.node_resource_group)?;
        let arm = Arm::new(&s)?;
        let ours = |v: &Value| vm::launched_for(v, &s.cluster_name);
        let vms = list_all(
            &arm,
            "VMs",
            format!(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines?api-version={}",
                vm::COMPUTE_API
            ),
            ours,
        )?;
        let nics = list_all(
            &arm,
            "NICs",
            format!(
                "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces?api-version={}",
                vm::NETWORK_API
            ),
            ours,
        )?;
        let names: Vec<&str> = vms
            .iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str))
            .collect();
        let orphans: Vec<Instance> = nics
            .iter()
            .filter_map(|n| vm::orphan_nic(n, &sub, &rg, &names))
            .collect();
        let mut out: Vec<Instance> = vms.iter().map(|v| instance_of(&s, v, &sub, &rg)).collect();
        out.extend(orphans);
        Ok(out)
    }

    fn is_drifted(claim: NodeClaim, class: NodeClass) -> Result<Option<String>, Error> {
        let (spec, status) = parse_class(&class)?;
        Ok(nodeclass::drift(
            &spec,
            &status,
            &claim.annotations,
            claim.kubelet_version.as_deref(),
            claim.image_id.as_deref(),
        )
        .map(str::to_string))
    }

    fn repair_policies() -> Vec<RepairPolicy> {
        vec![
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: ConditionStatus::False,
                toleration_seconds: 10 * 60,
            },
            RepairPolicy {
                condition_type: "Ready".into(),
                condition_status: ConditionStatus::Unknown,
                toleration_seconds: 10 * 60,
            },
        ]
    }
}

/// An ARM request of a launch that failed outright (throttled or failing
/// past every retry), as a create error that says what was being done,
/// under the reason of ARM's last answer.
fn in_create(arm: &Arm, what: &str, e: Error) -> Error {
    match e {
        Error::Other(o) => {
            let reason = arm
                .gave_up()
                .map(|last| Reason::of(&last).name(&last))
                .unwrap_or_else(|| "ARMRequestFailed".to_string());
            create_error(reason, format!("{what}: {}", o.message), o.retryable)
        }
        other => other,
    }
}

fn cleanup(arm: &Arm, vm_url: &str, nic_url: &str) {
    for url in [vm_url, nic_url] {
        if let Ok(r) = arm.send("DELETE", url, None)
            && r.is_success()
        {
            let _ = arm.wait(&r);
        }
    }
}

/// An instance from a VM, sized by the catalog with default shaping (the
/// NodeClass is not known here).
fn instance_of(s: &Settings, v: &Value, sub: &str, rg: &str) -> Instance {
    let (skus, _) = refresh::catalog(s);
    let size = v
        .pointer("/properties/hardwareProfile/vmSize")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let shaping = Shaping {
        region: s.location.clone(),
        max_pods: s.default_max_pods(),
        os_disk_size_gb: 128,
        vm_memory_overhead: s.vm_memory_overhead,
    };
    vm::instance(
        v,
        sub,
        rg,
        &s.location,
        skus.iter().find(|k| k.name == size),
        &shaping,
    )
}

/// Every resource of a paged ARM list that `keep` accepts, following nextLink.
fn list_all(
    arm: &Arm,
    what: &str,
    first: String,
    keep: impl Fn(&Value) -> bool,
) -> Result<Vec<Value>, Error> {
    let mut next = Some(first);
    let mut out = Vec::new();
    while let Some(url) = next.take() {
        let r = arm.send("GET", &url, None)?;
        if !r.is_success() {
            return Err(retryable(format!(
                "list {what}: {}",
                ArmError::from_body(r.status, &r.body)
            )));
        }
        let mut page: Value = r.json()?;
        if let Some(Value::Array(items)) = page.get_mut("value").map(Value::take) {
            out.extend(items.into_iter().filter(|v| keep(v)));
        }
        next = page
            .get("nextLink")
            .and_then(Value::as_str)
            .filter(|l| !l.is_empty())
            .map(str::to_string);
    }
    Ok(out)
}

/// Azure gives a spot VM at least 30 seconds' notice of its eviction as a
/// Scheduled Event (`Preempt`); the AKS node-problem-detector turns it into
/// this Node condition.
impl Interruption for Azure {
    fn interruption_signals() -> Vec<InterruptionSignal> {
        vec![InterruptionSignal {
            condition_type: "PreemptionScheduled".into(),
            condition_status: ConditionStatus::True,
            notice_seconds: 30,
            reason: "SpotInterrupted".into(),
        }]
    }

    fn offering_interrupted(offering: OfferingRef, seconds: u64) {
        cache::set(
            &catalog::unavailable_key(
                &offering.instance_type,
                &offering.zone,
                &offering.capacity_type,
            ),
            b"SpotInterrupted",
            seconds,
        );
    }
}

/// No compact catalog: the catalog is built per call, so get-instance-types is cheaper.
impl CompactCatalog for Azure {}

// Exported only in the component: natively the crate is a library of the
// pure modules (tests, the emulator), and the export symbols do not link.
#[cfg(target_arch = "wasm32")]
karpenter_plugin_sdk::export!(Azure);
