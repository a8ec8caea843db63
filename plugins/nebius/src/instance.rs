//! Nebius instances as the contract's instances: providerIDs, the labels
//! that tie an instance to its NodeClaim, states and times.
//!
//! Architecture Invariant: pure.

use crate::catalog::{self, Shape};
use crate::proto::{self, state};
use karpenter_plugin_sdk::prelude::*;

pub const SCHEME: &str = "aks-nebius";
/// Labels on the Nebius resources.
pub const LABEL_NODECLAIM: &str = "karpenter-nodeclaim";
pub const LABEL_NODEPOOL: &str = "karpenter-nodepool";
pub const LABEL_CLUSTER: &str = "karpenter-cluster";
pub const LABEL_CAPACITY_TYPE: &str = "karpenter-capacity-type";
pub const LABEL_WIREGUARD_ADDRESS: &str = "wireguard-address";

/// As in aks-flex: the NodeClaim's name, which the kubelet's --provider-id
/// can carry before the instance exists.
pub fn provider_id(claim: &str) -> String {
    format!("{SCHEME}://{claim}")
}

pub fn claim_of(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix(SCHEME)?
        .strip_prefix("://")
        .filter(|c| !c.is_empty() && !c.contains('/'))
}

pub fn boot_disk_name(claim: &str) -> String {
    format!("{claim}-boot")
}

/// A boot disk of this cluster whose instance does not exist: what a launch
/// leaves when its instance never came up and its NodeClaim went away.
/// Listed as a leftover under an id of its own; `delete` removes it by the
/// NodeClaim's name.
pub fn orphan_disk(disk: &proto::Disk, cluster: &str, instances: &[&str]) -> Option<Instance> {
    let meta = disk.metadata.as_ref()?;
    let label = |k: &str| meta.labels.get(k).map(String::as_str);
    let claim = label(LABEL_NODECLAIM)?;
    if cluster.is_empty()
        || label(LABEL_CLUSTER) != Some(cluster)
        || meta.name != boot_disk_name(claim)
        || instances.contains(&claim)
    {
        return None;
    }
    Some(leftover(
        claim.to_string(),
        String::new(),
        format!("{SCHEME}://{claim}/boot-disk"),
    ))
}

pub fn type_name(i: &proto::Instance) -> String {
    i.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .map(|r| format!("{}-{}", r.platform, r.preset.clone().unwrap_or_default()))
        .unwrap_or_default()
}

pub fn label<'a>(i: &'a proto::Instance, key: &str) -> Option<&'a str> {
    i.metadata
        .as_ref()
        .and_then(|m| m.labels.get(key))
        .map(String::as_str)
}

fn instance_state(i: &proto::Instance) -> InstanceState {
    match i.status.as_ref().map(|s| s.state).unwrap_or_default() {
        state::RUNNING => InstanceState::Running,
        state::STOPPING | state::STOPPED => InstanceState::Stopping,
        state::DELETING | state::ERROR => InstanceState::Terminated,
        _ => InstanceState::Pending,
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub fn rfc3339(t: &proto::Timestamp) -> String {
    let (y, mo, d) = civil(t.seconds.div_euclid(86_400));
    let s = t.seconds.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

/// The contract's view of an instance; `shape` sizes it when known.
pub fn to_wit(
    i: &proto::Instance,
    region: &str,
    shape: Option<&Shape>,
    max_pods: u64,
    disk_gb: u64,
) -> Instance {
    let claim = label(i, LABEL_NODECLAIM)
        .or_else(|| i.metadata.as_ref().map(|m| m.name.as_str()))
        .unwrap_or_default()
        .to_string();
    let capacity_type = label(i, LABEL_CAPACITY_TYPE)
        .map(str::to_string)
        .unwrap_or_else(|| {
            if i.spec.as_ref().is_some_and(|s| s.preemptible.is_some()) {
                labels::SPOT.into()
            } else {
                labels::ON_DEMAND.into()
            }
        });
    let (labels, capacity, allocatable) = match shape {
        Some(s) => {
            let capacity = catalog::capacity(s, max_pods, disk_gb);
            let o = catalog::overhead(s, max_pods);
            let allocatable = allocatable(s, max_pods, disk_gb, &o);
            (catalog::labels(s, region), capacity, allocatable)
        }
        None => (Vec::new(), Vec::new(), Vec::new()),
    };
    Instance {
        node_claim: claim.clone(),
        node_pool: label(i, LABEL_NODEPOOL).unwrap_or_default().to_string(),
        provider_id: provider_id(&claim),
        image_id: String::new(),
        instance_type: type_name(i),
        zone: region.to_string(),
        capacity_type,
        state: instance_state(i),
        labels,
        capacity,
        allocatable,
        created_at: i
            .metadata
            .as_ref()
            .and_then(|m| m.created_at.as_ref())
            .map(rfc3339),
    }
}

fn allocatable(s: &Shape, max_pods: u64, disk_gb: u64, o: &Overhead) -> Vec<(String, String)> {
    let reserved = |k: &str| {
        o.kube_reserved
            .iter()
            .chain(&o.eviction_threshold)
            .filter(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    let cpu_reserved: u64 = reserved("cpu")
        .iter()
        .map(|v| {
            v.strip_suffix('m')
                .and_then(|m| m.parse().ok())
                .unwrap_or_else(|| v.parse::<u64>().unwrap_or(0) * 1000)
        })
        .sum();
    let mem_reserved: u64 = reserved("memory")
        .iter()
        .filter_map(|v| v.strip_suffix("Mi")?.parse::<u64>().ok())
        .sum();
    let mut a = resources(&[
        ("cpu", millis((s.vcpu * 1000).saturating_sub(cpu_reserved))),
        (
            "memory",
            mib((s.memory_gib * 1024).saturating_sub(mem_reserved)),
        ),
        ("pods", max_pods.to_string()),
        ("ephemeral-storage", format!("{disk_gb}G")),
    ]);
    if s.gpus > 0 {
        a.push(("nvidia.com/gpu".into(), s.gpus.to_string()));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let p = provider_id("nebius-cpu-nodepool-6g8v8");
        assert_eq!(p, "aks-nebius://nebius-cpu-nodepool-6g8v8");
        assert_eq!(claim_of(&p), Some("nebius-cpu-nodepool-6g8v8"));
        assert_eq!(claim_of("azure:///x"), None);
        assert_eq!(claim_of("aks-nebius://"), None);
    }

    #[test]
    fn times() {
        let t = |seconds| proto::Timestamp { seconds, nanos: 0 };
        assert_eq!(rfc3339(&t(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(&t(1_772_224_632)), "2026-02-27T20:37:12Z");
    }

    #[test]
    fn allocatable_is_capacity_less_overhead() {
        let s = Shape {
            name: "cpu-d3-16vcpu-64gb".into(),
            platform: "cpu-d3".into(),
            preset: "16vcpu-64gb".into(),
            vcpu: 16,
            memory_gib: 64,
            gpus: 0,
            preemptible: false,
        };
        let a = allocatable(&s, 110, 128, &catalog::overhead(&s, 110));
        assert!(a.contains(&("cpu".into(), "15890m".into())), "{a:?}");
        assert!(a.contains(&("memory".into(), "63971Mi".into())), "{a:?}");
    }

    #[test]
    fn a_boot_disk_of_this_cluster_without_its_instance_is_an_instance_to_collect() {
        let disk = |labels: &[(&str, &str)], name: &str| proto::Disk {
            metadata: Some(proto::ResourceMetadata {
                name: name.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            }),
            spec: None,
        };
        let ours = disk(
            &[(LABEL_NODECLAIM, "cpu-a"), (LABEL_CLUSTER, "aks")],
            "cpu-a-boot",
        );
        let i = orphan_disk(&ours, "aks", &[]).expect("orphan");
        assert_eq!(i.node_claim, "cpu-a");
        assert_eq!(i.provider_id, "aks-nebius://cpu-a/boot-disk");
        assert_eq!(
            claim_of(&i.provider_id),
            None,
            "not an instance's providerID"
        );
        assert!(
            orphan_disk(&ours, "aks", &["cpu-a"]).is_none(),
            "its instance exists"
        );
        assert!(
            orphan_disk(&ours, "other", &[]).is_none(),
            "another cluster's"
        );
        let unlabelled = disk(&[(LABEL_NODECLAIM, "cpu-a")], "cpu-a-boot");
        assert!(
            orphan_disk(&unlabelled, "aks", &[]).is_none(),
            "no cluster label"
        );
        let data = disk(
            &[(LABEL_NODECLAIM, "cpu-a"), (LABEL_CLUSTER, "aks")],
            "data",
        );
        assert!(orphan_disk(&data, "aks", &[]).is_none(), "not a boot disk");
    }
}
