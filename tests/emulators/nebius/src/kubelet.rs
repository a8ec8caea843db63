//! The VM's kubelet, played by the emulator: the Node an instance registers,
//! read from its cloud-init (the plugin's own flag parser), with the
//! preset's capacity less the reservations the flags name. kwok keeps it
//! Ready.

use karpenter_plugin_nebius::bootstrap;
use karpenter_plugin_nebius::proto::PresetResources;
use serde_json::{Value, json};

/// Where Nodes are registered.
#[derive(Clone, Debug)]
pub struct Kube {
    pub endpoint: String,
    pub ca_pem: Vec<u8>,
    pub token: String,
}

pub fn node_name(instance_id: &str) -> String {
    // Nebius VMs are named after their id; ids already start with
    // "computeinstance-".
    instance_id.to_string()
}

fn number(s: &str) -> u64 {
    s.trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or(0)
}

/// The Node the kubelet would register; `private_ip` is the VPC address,
/// overridden by `--node-ip` (the WireGuard address).
pub fn node(
    instance_id: &str,
    user_data: &str,
    r: &PresetResources,
    disk_gb: i64,
    private_ip: &str,
) -> Option<Value> {
    let flags = bootstrap::kubelet_flags(user_data);
    if flags.is_empty() {
        return None;
    }
    let flag = |k: &str| flags.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let name = node_name(instance_id);
    let version = user_data
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("KUBERNETES_VERSION="))
        .unwrap_or("1.34.2");
    let mut labels = serde_json::Map::new();
    for kv in flag("node-labels")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
    {
        if let Some((k, v)) = kv.split_once('=') {
            labels.insert(k.into(), json!(v));
        }
    }
    labels.insert("kubernetes.io/hostname".into(), json!(name));
    labels.insert("type".into(), json!("kwok"));
    let taints: Vec<Value> = flag("register-with-taints")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .filter_map(|t| {
            let (kv, effect) = t.rsplit_once(':')?;
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            Some(json!({"key": k, "value": v, "effect": effect}))
        })
        .collect();
    let max_pods = flag("max-pods").map(|p| number(&p)).unwrap_or(110);
    let reserved = flag("kube-reserved").unwrap_or_default();
    let part = |k: &str| {
        reserved
            .split(',')
            .find_map(|p| p.strip_prefix(&format!("{k}=")))
            .map(number)
            .unwrap_or(0)
    };
    let evict = flag("eviction-hard")
        .and_then(|e| e.strip_prefix("memory.available<").map(number))
        .unwrap_or(0);
    let cpu = r.vcpu_count.max(0) as u64;
    let memory_mib = r.memory_gibibytes.max(0) as u64 * 1024;
    let mut capacity = json!({"cpu": cpu.to_string(), "memory": format!("{memory_mib}Mi"), "pods": max_pods.to_string(), "ephemeral-storage": format!("{disk_gb}G")});
    let mut allocatable = json!({
        "cpu": format!("{}m", (cpu * 1000).saturating_sub(part("cpu"))),
        "memory": format!("{}Mi", memory_mib.saturating_sub(part("memory") + evict)),
        "pods": max_pods.to_string(),
        "ephemeral-storage": format!("{disk_gb}G"),
    });
    if r.gpu_count > 0 {
        capacity["nvidia.com/gpu"] = json!(r.gpu_count.to_string());
        allocatable["nvidia.com/gpu"] = json!(r.gpu_count.to_string());
    }
    let ip = flag("node-ip").unwrap_or_else(|| private_ip.to_string());
    let mut annotations =
        json!({"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"});
    if user_data.contains("wg-quick@wg0") {
        // What the node's runcmd publishes once wg0 is up.
        annotations[bootstrap::PUBLIC_KEY_ANNOTATION] = json!(format!("pubkey-of-{name}"));
    }
    Some(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"providerID": flag("provider-id").unwrap_or_default(), "taints": taints},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}],
            "nodeInfo": {"kubeletVersion": format!("v{}", version.trim_start_matches('v')), "architecture": "amd64", "operatingSystem": "linux",
                         "osImage": "Ubuntu 24.04.4 LTS", "containerRuntimeVersion": "containerd://2.0.4", "kernelVersion": "6.11.0-1016-nvidia",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""}
        }
    }))
}
