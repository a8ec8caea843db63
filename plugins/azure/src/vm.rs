//! ARM resource bodies and identities: the NIC and VM a NodeClaim becomes,
//! providerIDs, and the instance read back from a VM.
//!
//! Architecture Invariant: pure; `arm` sends what is built here.

use crate::catalog::{self, REGIONAL_ZONE, Shaping, Sku};
use karpenter_plugin_sdk::prelude::*;
use serde_json::{Value, json};

pub const COMPUTE_API: &str = "2024-07-01";
pub const NETWORK_API: &str = "2024-05-01";
pub const SKUS_API: &str = "2021-07-01";

pub const TAG_CLUSTER: &str = "karpenter.azure.com_cluster";
pub const TAG_NODEPOOL: &str = "karpenter.sh_nodepool";
pub const TAG_NODECLAIM: &str = "karpenter.sh_nodeclaim";
pub const TAG_BILLING: &str = "compute.aks.billing";

/// VMs and NICs are named after the NodeClaim.
pub fn resource_name(node_claim: &str) -> String {
    format!("aks-{node_claim}")
}

pub fn vm_path(sub: &str, rg: &str, name: &str) -> String {
    format!(
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{name}"
    )
}

pub fn nic_path(sub: &str, rg: &str, name: &str) -> String {
    format!(
        "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network/networkInterfaces/{name}"
    )
}

/// The VM's ARM request path with its api-version.
pub fn vm_url(sub: &str, rg: &str, name: &str) -> String {
    format!("{}?api-version={COMPUTE_API}", vm_path(sub, rg, name))
}

/// The NIC's ARM request path with its api-version.
pub fn nic_url(sub: &str, rg: &str, name: &str) -> String {
    format!("{}?api-version={NETWORK_API}", nic_path(sub, rg, name))
}

pub fn provider_id(sub: &str, rg: &str, name: &str) -> String {
    format!("azure://{}", vm_path(sub, &rg.to_ascii_lowercase(), name))
}

/// (subscription, resource group, VM name) of an `azure:///subscriptions/...` providerID.
pub fn parse_provider_id(id: &str) -> Option<(String, String, String)> {
    let path = id.strip_prefix("azure://")?;
    let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ok = p.len() == 8
        && p[0].eq_ignore_ascii_case("subscriptions")
        && p[2].eq_ignore_ascii_case("resourceGroups")
        && p[4].eq_ignore_ascii_case("providers")
        && p[5].eq_ignore_ascii_case("Microsoft.Compute")
        && p[6].eq_ignore_ascii_case("virtualMachines")
        && p.iter().all(|s| !s.is_empty());
    ok.then(|| (p[1].to_string(), p[3].to_string(), p[7].to_string()))
}

/// The zone number ARM wants ("2") for a zone label ("westus3-2"); None for regional.
pub fn zone_number(zone_label: &str) -> Option<&str> {
    if zone_label == REGIONAL_ZONE {
        return None;
    }
    zone_label.rsplit_once('-').map(|(_, n)| n)
}

pub fn nic_body(location: &str, subnet_id: &str, accelerated: bool, tags: &Value) -> Value {
    json!({
        "location": location,
        "tags": tags,
        "properties": {
            "enableAcceleratedNetworking": accelerated,
            "enableIPForwarding": true,
            "ipConfigurations": [{
                "name": "ipconfig1",
                "properties": {
                    "primary": true,
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": {"id": subnet_id}
                }
            }]
        }
    })
}

/// Everything the VM body needs besides the catalog.
pub struct VmRequest<'a> {
    pub location: &'a str,
    pub name: &'a str,
    pub sku: &'a Sku,
    pub zone_label: &'a str,
    pub spot: bool,
    pub image_id: &'a str,
    pub os_disk_size_gb: u64,
    pub nic_id: &'a str,
    pub custom_data: &'a str,
    pub ssh_public_key: &'a str,
    pub tags: &'a Value,
    pub encryption_at_host: bool,
    /// User-assigned identities (ARM ids) given to the node.
    pub identities: &'a [String],
    /// The capacity reservation group (ARM id) the VM is placed in.
    pub capacity_reservation_group: Option<&'a str>,
}

pub fn vm_body(r: &VmRequest) -> Value {
    let mut properties = json!({
        "hardwareProfile": {"vmSize": r.sku.name},
        "storageProfile": {
            "imageReference": {"communityGalleryImageId": r.image_id},
            "osDisk": {
                "name": r.name,
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "diskSizeGB": r.os_disk_size_gb,
                "managedDisk": {"storageAccountType": if r.sku.premium_io { "Premium_LRS" } else { "Standard_LRS" }}
            }
        },
        "osProfile": {
            "computerName": r.name,
            "adminUsername": "azureuser",
            "customData": r.custom_data,
            "linuxConfiguration": {
                "disablePasswordAuthentication": true,
                "ssh": {"publicKeys": [{"path": "/home/azureuser/.ssh/authorized_keys", "keyData": r.ssh_public_key}]}
            }
        },
        "networkProfile": {"networkInterfaces": [{"id": r.nic_id, "properties": {"primary": true, "deleteOption": "Delete"}}]},
        "priority": if r.spot { "Spot" } else { "Regular" },
    });
    if r.spot {
        properties["evictionPolicy"] = json!("Delete");
        properties["billingProfile"] = json!({"maxPrice": -1});
    }
    if let Some(group) = r.capacity_reservation_group {
        properties["capacityReservation"] = json!({"capacityReservationGroup": {"id": group}});
    }
    if r.encryption_at_host {
        properties["securityProfile"] = json!({"encryptionAtHost": true});
    }
    let mut body = json!({"location": r.location, "tags": r.tags, "properties": properties});
    if let Some(n) = zone_number(r.zone_label) {
        body["zones"] = json!([n]);
    }
    if !r.identities.is_empty() {
        let ids: serde_json::Map<String, Value> = r
            .identities
            .iter()
            .map(|i| (i.clone(), json!({})))
            .collect();
        body["identity"] = json!({"type": "UserAssigned", "userAssignedIdentities": ids});
    }
    body
}

/// Whether this cluster's controller launched the VM: it carries a NodePool
/// tag and this cluster's name. A VM of another cluster in the same
/// resource group, or one without a cluster tag, is never claimed, so
/// garbage collection cannot take it for a leak.
pub fn launched_for(vm: &Value, cluster: &str) -> bool {
    let tags = vm.get("tags");
    let tag = |k: &str| tags.and_then(|t| t.get(k)).and_then(Value::as_str);
    tag(TAG_NODEPOOL).is_some() && !cluster.is_empty() && tag(TAG_CLUSTER) == Some(cluster)
}

/// A NIC of this cluster whose VM does not exist: what a launch leaves when
/// its NodeClaim goes away before the VM is made. Listed as a leftover
/// under the NIC's own id; `delete` removes it by the NodeClaim's name.
pub fn orphan_nic(nic: &Value, sub: &str, rg: &str, vm_names: &[&str]) -> Option<Instance> {
    let name = nic.get("name").and_then(Value::as_str)?;
    if vm_names.contains(&name) {
        return None;
    }
    let tag = |k: &str| {
        nic.get("tags")
            .and_then(|t| t.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let node_claim = tag(TAG_NODECLAIM);
    let node_claim = if node_claim.is_empty() {
        name.strip_prefix("aks-").unwrap_or(name).to_string()
    } else {
        node_claim
    };
    Some(leftover(
        node_claim,
        tag(TAG_NODEPOOL),
        format!("azure://{}", nic_path(sub, &rg.to_ascii_lowercase(), name)),
    ))
}

/// The instance a VM is: from its tags, size, zone, priority and state; the
/// catalog fills in labels and resources when it knows the size.
pub fn instance(
    vm: &Value,
    sub: &str,
    rg: &str,
    region: &str,
    sku: Option<&Sku>,
    shaping: &Shaping,
) -> Instance {
    let s = |v: &Value, path: &[&str]| {
        let mut cur = v;
        for p in path {
            cur = cur.get(*p).unwrap_or(&Value::Null);
        }
        cur.as_str().unwrap_or_default().to_string()
    };
    let name = s(vm, &["name"]);
    let tags = vm.get("tags").cloned().unwrap_or(Value::Null);
    let node_claim = tags
        .get(TAG_NODECLAIM)
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| name.strip_prefix("aks-").unwrap_or(&name).to_string());
    let node_pool = tags
        .get(TAG_NODEPOOL)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let size = s(vm, &["properties", "hardwareProfile", "vmSize"]);
    let zone = vm
        .get("zones")
        .and_then(Value::as_array)
        .and_then(|z| z.first())
        .and_then(Value::as_str)
        .map(|n| catalog::zone_label(region, n))
        .unwrap_or_else(|| REGIONAL_ZONE.to_string());
    let group = s(
        vm,
        &[
            "properties",
            "capacityReservation",
            "capacityReservationGroup",
            "id",
        ],
    );
    let group = crate::reservations::GroupId::parse(&group);
    let capacity_type = if s(vm, &["properties", "priority"]).eq_ignore_ascii_case("Spot") {
        labels::SPOT
    } else if group.is_some() {
        labels::RESERVED
    } else {
        labels::ON_DEMAND
    };
    let state = match s(vm, &["properties", "provisioningState"]).as_str() {
        "Succeeded" => InstanceState::Running,
        "Deleting" => InstanceState::Stopping,
        "Failed" | "Canceled" | "Deleted" => InstanceState::Terminated,
        _ => InstanceState::Pending,
    };
    let scope = if zone == REGIONAL_ZONE {
        catalog::REGIONAL
    } else {
        catalog::ZONAL
    };
    let mut node_labels = vec![
        (labels::INSTANCE_TYPE.to_string(), size.clone()),
        (labels::ZONE.to_string(), zone.clone()),
        (labels::REGION.to_string(), region.to_string()),
        (labels::CAPACITY_TYPE.to_string(), capacity_type.to_string()),
        (labels::ARCH.to_string(), "amd64".to_string()),
        (labels::OS.to_string(), "linux".to_string()),
        (
            catalog::LABEL_PLACEMENT_SCOPE.to_string(),
            scope.to_string(),
        ),
    ];
    if let Some(g) = &group {
        node_labels.push((
            crate::reservations::LABEL_GROUP.to_string(),
            crate::reservations::label_value(&g.name),
        ));
    }
    let (capacity, allocatable) = match sku {
        Some(k) => {
            let it = catalog::instance_type(k, shaping, &catalog::Prices::default(), &|_| false);
            for r in &it.requirements {
                if r.key.starts_with("karpenter.azure.com/sku-") && r.values.len() == 1 {
                    node_labels.push((r.key.clone(), r.values[0].clone()));
                }
            }
            let allocatable = allocatable(&it);
            (it.capacity, allocatable)
        }
        None => (Vec::new(), Vec::new()),
    };
    let created = s(vm, &["properties", "timeCreated"]);
    Instance {
        node_claim,
        node_pool,
        provider_id: provider_id(sub, rg, &name),
        image_id: s(
            vm,
            &[
                "properties",
                "storageProfile",
                "imageReference",
                "communityGalleryImageId",
            ],
        ),
        instance_type: size,
        zone,
        capacity_type: capacity_type.to_string(),
        state,
        labels: node_labels,
        capacity,
        allocatable,
        created_at: (!created.is_empty()).then_some(created),
    }
}

/// capacity - kube-reserved - eviction threshold, for cpu and memory.
fn allocatable(it: &InstanceType) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in &it.capacity {
        let reserved = |list: &[(String, String)]| lookup(list, k).map(str::to_string);
        let value = match k.as_str() {
            "cpu" => {
                let total = v.parse::<u64>().unwrap_or(0) * 1000;
                let r = reserved(&it.overhead.kube_reserved)
                    .map(|x| parse_millis(&x))
                    .unwrap_or(0);
                millis(total.saturating_sub(r))
            }
            "memory" => {
                let total = parse_mib(v);
                let r = reserved(&it.overhead.kube_reserved)
                    .map(|x| parse_mib(&x))
                    .unwrap_or(0)
                    + reserved(&it.overhead.eviction_threshold)
                        .map(|x| parse_mib(&x))
                        .unwrap_or(0);
                mib(total.saturating_sub(r))
            }
            _ => v.clone(),
        };
        out.push((k.clone(), value));
    }
    out
}

fn parse_millis(q: &str) -> u64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<u64>().unwrap_or(0) * 1000,
    }
}

fn parse_mib(q: &str) -> u64 {
    q.strip_suffix("Mi")
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Prices, SKUS_CSV, instance_type, parse_skus};

    fn shaping() -> Shaping {
        Shaping {
            region: "westus3".into(),
            max_pods: 110,
            os_disk_size_gb: 128,
            vm_memory_overhead: 0.075,
        }
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn provider_ids_round_trip() {
        let id = provider_id("sub", "MC_RG_aks_westus3", "aks-default-x");
        assert_eq!(
            id,
            "azure:///subscriptions/sub/resourceGroups/mc_rg_aks_westus3/providers/Microsoft.Compute/virtualMachines/aks-default-x"
        );
        assert_eq!(
            parse_provider_id(&id),
            Some((
                "sub".into(),
                "mc_rg_aks_westus3".into(),
                "aks-default-x".into()
            ))
        );
        assert_eq!(parse_provider_id("kwok://x"), None);
        assert_eq!(zone_number("westus3-2"), Some("2"));
        assert_eq!(zone_number("0"), None);
    }

    /// The SDK's choice for a NodeClaim with these requirements and labels.
    fn pick<'a>(
        requirements: &[Requirement],
        labels: &[(String, String)],
        types: &'a [InstanceType],
    ) -> Option<(&'a InstanceType, &'a Offering)> {
        let claim = NodeClaim {
            name: "c".into(),
            node_pool: "default".into(),
            labels: labels.to_vec(),
            annotations: vec![],
            taints: vec![],
            startup_taints: vec![],
            requirements: requirements.to_vec(),
            resource_requests: vec![],
            node_class_ref:
                karpenter_plugin_sdk::bindings::karpenter::provider::types::NodeClassRef {
                    group: "karpenter.azure.com".into(),
                    kind: "AKSNodeClass".into(),
                    name: "default".into(),
                },
            provider_id: None,
            image_id: None,
            kubelet_version: None,
        };
        karpenter_plugin_sdk::requirements::offering_to_launch(&claim, types)
    }

    #[test]
    fn picks_the_first_listed_type_honouring_placement_scope() {
        let prices = Prices::embedded("westus3");
        let types: Vec<InstanceType> = parse_skus(SKUS_CSV)
            .iter()
            .map(|s| instance_type(s, &shaping(), &prices, &|_| false))
            .collect();
        let base = vec![
            req(
                labels::INSTANCE_TYPE,
                Operator::In,
                &["Standard_D4as_v5", "Standard_D4s_v5"],
            ),
            req(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
        ];
        let (it, o) = pick(&base, &[], &types).expect("offering");
        assert_eq!(it.name, "Standard_D4as_v5");
        assert_eq!(o.capacity_type, "on-demand");
        // Listed first (a NodeOverlay made it cheaper in the host's eyes),
        // the dearer type is the one launched.
        let mut overlaid = base.clone();
        overlaid[0] = req(
            labels::INSTANCE_TYPE,
            Operator::In,
            &["Standard_D4s_v5", "Standard_D4as_v5"],
        );
        assert_eq!(
            pick(&overlaid, &[], &types).expect("offering").0.name,
            "Standard_D4s_v5"
        );
        let mut regional = base.clone();
        regional.push(req(
            catalog::LABEL_PLACEMENT_SCOPE,
            Operator::In,
            &["regional"],
        ));
        assert_eq!(pick(&regional, &[], &types).expect("regional").1.zone, "0");
        let mut zonal = base.clone();
        zonal.push(req(
            catalog::LABEL_PLACEMENT_SCOPE,
            Operator::In,
            &["zonal"],
        ));
        assert_ne!(pick(&zonal, &[], &types).expect("zonal").1.zone, "0");
        let gpu = vec![
            req(catalog::LABEL_SKU_GPU_NAME, Operator::In, &["A100"]),
            req(catalog::LABEL_SKU_CPU, Operator::Lt, &["30"]),
        ];
        assert_eq!(
            pick(&gpu, &[], &types).expect("gpu").0.name,
            "Standard_NC24ads_A100_v4"
        );
        let none = vec![
            req(labels::INSTANCE_TYPE, Operator::In, &["Standard_B2s"]),
            req(labels::CAPACITY_TYPE, Operator::In, &["spot"]),
        ];
        assert!(pick(&none, &[], &types).is_none());
        // The NodePool's name and template labels are the node's, not the
        // machine's: they do not rule a type out.
        let mut templated = base.clone();
        templated.push(req(
            labels::NODE_POOL,
            Operator::In,
            &["azure-cpu-nodepool"],
        ));
        templated.push(req(
            "kubernetes.azure.com/ebpf-dataplane",
            Operator::In,
            &["cilium"],
        ));
        assert!(pick(&templated, &[], &types).is_none());
        let template = [(
            "kubernetes.azure.com/ebpf-dataplane".to_string(),
            "cilium".to_string(),
        )];
        assert_eq!(
            pick(&templated, &template, &types)
                .expect("offering")
                .0
                .name,
            "Standard_D4as_v5"
        );
    }

    #[test]
    fn vm_bodies_and_instances() {
        let sku = parse_skus(SKUS_CSV)
            .into_iter()
            .find(|s| s.name == "Standard_D4s_v5")
            .expect("sku");
        let tags = json!({TAG_NODEPOOL: "default", TAG_NODECLAIM: "default-x", TAG_CLUSTER: "aks", TAG_BILLING: "linux"});
        let body = vm_body(&VmRequest {
            location: "westus3",
            name: "aks-default-x",
            sku: &sku,
            zone_label: "westus3-2",
            spot: true,
            image_id: "/CommunityGalleries/g/images/i/versions/1",
            os_disk_size_gb: 128,
            nic_id: "/nic",
            custom_data: "IyE=",
            ssh_public_key: "ssh-ed25519 AAAA",
            tags: &tags,
            encryption_at_host: false,
            identities: &[],
            capacity_reservation_group: None,
        });
        assert_eq!(body["zones"], json!(["2"]));
        assert_eq!(body["properties"]["priority"], "Spot");
        assert_eq!(body["properties"]["evictionPolicy"], "Delete");
        assert_eq!(body["properties"]["billingProfile"]["maxPrice"], -1);
        assert_eq!(
            body["properties"]["storageProfile"]["osDisk"]["deleteOption"],
            "Delete"
        );

        let mut vm = body.clone();
        vm["name"] = json!("aks-default-x");
        vm["properties"]["provisioningState"] = json!("Succeeded");
        let i = instance(&vm, "sub", "MC_rg", "westus3", Some(&sku), &shaping());
        assert_eq!(i.node_claim, "default-x");
        assert_eq!(i.node_pool, "default");
        assert_eq!(i.zone, "westus3-2");
        assert_eq!(i.capacity_type, "spot");
        assert!(matches!(i.state, InstanceState::Running));
        assert_eq!(i.image_id, "/CommunityGalleries/g/images/i/versions/1");
        // 4000m - 140m; 15155Mi - 2250Mi - 100Mi.
        assert_eq!(lookup(&i.allocatable, "cpu"), Some("3860m"));
        assert_eq!(lookup(&i.allocatable, "memory"), Some("12805Mi"));
        assert_eq!(lookup(&i.labels, catalog::LABEL_SKU_CPU), Some("4"));
    }

    #[test]
    fn only_vms_tagged_with_this_cluster_are_claimed() {
        let vm = |tags: Value| json!({"name": "aks-x", "tags": tags});
        let ours = vm(json!({TAG_NODEPOOL: "default", TAG_CLUSTER: "aks"}));
        assert!(launched_for(&ours, "aks"));
        assert!(!launched_for(&ours, "other"), "another cluster's");
        assert!(
            !launched_for(&vm(json!({TAG_NODEPOOL: "default"})), "aks"),
            "no cluster tag"
        );
        assert!(
            !launched_for(&vm(json!({TAG_CLUSTER: "aks"})), "aks"),
            "no NodePool tag"
        );
        assert!(!launched_for(&json!({"name": "aks-y"}), "aks"), "untagged");
    }

    #[test]
    fn a_nic_without_its_vm_is_an_instance_to_collect() {
        let nic = json!({"name": "aks-default-x", "tags": {TAG_NODEPOOL: "default", TAG_NODECLAIM: "default-x", TAG_CLUSTER: "aks"}});
        let i = orphan_nic(&nic, "sub", "MC_rg", &[]).expect("orphan");
        assert_eq!(i.node_claim, "default-x");
        assert_eq!(
            i.provider_id,
            "azure:///subscriptions/sub/resourceGroups/mc_rg/providers/Microsoft.Network/networkInterfaces/aks-default-x"
        );
        assert_eq!(parse_provider_id(&i.provider_id), None, "not a VM's");
        assert!(i.created_at.is_none() && matches!(i.state, InstanceState::Pending));
        assert!(
            orphan_nic(&nic, "sub", "MC_rg", &["aks-default-x"]).is_none(),
            "its VM exists"
        );
    }
}
