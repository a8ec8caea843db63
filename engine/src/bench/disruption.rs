//! A consolidatable cluster for the disruption benchmark: nodes of varied
//! sizes at varied utilization, some just emptied, some protected by a
//! do-not-disrupt pod or a PDB, under a budget.
//!
//! Deterministic: draws come from splitmix64 seeded with 42.

use crate::disruption::{
    Budget, ClusterNode, DisruptionNodePool, DisruptionReason, DisruptionSnapshot, NodePod,
    PodDisruptionBudget,
};
use crate::map::StringMap;
use crate::snapshot::{
    DaemonSet, InstanceType, LabelSelector, NodePool, Pod, PodTemplate, TopologySpreadConstraint,
    WhenUnsatisfiable,
};
use std::sync::Arc;
use vocabulary::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, OS, ZONE};

use super::{SplitMix64, instance_type};

const MI: i64 = 1 << 20;
/// 2024-05-15 12:00 UTC, a Wednesday.
const NOW: i64 = 1_715_774_400;
const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
/// Types `fake-it-0..64`: 1 to 64 CPUs.
const TYPES: usize = 64;
const APPS: usize = 20;

fn pod(i: usize, rng: &mut SplitMix64) -> NodePod {
    const CPUS: [i64; 5] = [100, 250, 500, 1000, 1500];
    const MEMS: [i64; 6] = [128, 256, 512, 1024, 2048, 4096];
    let app = format!("app-{}", rng.below(APPS));
    let mut p = Pod {
        namespace: "default".to_string(),
        name: format!("pod-{i}"),
        uid: format!("uid-{i:08}"),
        creation: i as i64,
        buffer: None,
        nominated_node: None,
        template: Arc::new(PodTemplate {
            labels: StringMap::from([("app".to_string(), app.clone())]),
            requests: StringMap::from([
                ("cpu".to_string(), *rng.pick(&CPUS)),
                ("memory".to_string(), *rng.pick(&MEMS) * MI),
            ]),
            ..PodTemplate::default()
        }),
    };
    // Some spread softly over zones, as many deployments do.
    if rng.below(10) == 0 {
        p.topology_spread_constraints = vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.to_string(),
            when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
            label_selector: Some(LabelSelector {
                match_labels: StringMap::from([("app".to_string(), app)]),
                match_expressions: Vec::new(),
            }),
            min_domains: None,
            node_affinity_policy: Default::default(),
            node_taints_policy: Default::default(),
            match_label_keys: Vec::new(),
        }];
    }
    let mut np = NodePod {
        pod: p,
        start_time: Some(NOW - 3_600),
        ..NodePod::default()
    };
    match rng.below(100) {
        0 => np.do_not_disrupt = Some("true".to_string()),
        1 | 2 => {
            np.pod
                .labels
                .insert("app".to_string(), "critical".to_string());
        }
        _ => {}
    }
    np
}

/// The smallest type whose allocatable covers `cpu` millis and `memory` bytes.
fn smallest_fitting(types: &[InstanceType], cpu: i64, memory: i64) -> &InstanceType {
    let fits = |t: &&InstanceType| {
        let get = |k: &str| t.capacity.get(k).copied().unwrap_or(0);
        let over = |k: &str| t.overhead.kube_reserved.get(k).copied().unwrap_or(0);
        get("cpu") - over("cpu") >= cpu && get("memory") - over("memory") >= memory
    };
    types.iter().find(fits).unwrap_or(&types[types.len() - 1])
}

/// `nodes` nodes holding about `pods` pods, with one NodePool over 64
/// benchmark instance types. Nodes run 25-95% full; 5% were just emptied (so
/// they are capacity, not yet consolidatable); 1% of pods carry
/// do-not-disrupt and 2% sit under a PDB that allows no disruption; the pool
/// allows 10% of its nodes to be disrupted at once.
pub fn disruption_snapshot(nodes: usize, pods: usize) -> DisruptionSnapshot {
    let mut rng = SplitMix64::new(42);
    let types: Vec<InstanceType> = (0..TYPES).map(instance_type).collect();
    let daemon = DaemonSet {
        namespace: "kube-system".to_string(),
        name: "agent".to_string(),
        requests: StringMap::from([("cpu".to_string(), 100), ("memory".to_string(), 128 * MI)]),
        ..DaemonSet::default()
    };
    let busy = nodes - nodes / 20;
    let mut per_node: Vec<Vec<NodePod>> = vec![Vec::new(); nodes];
    if busy > 0 {
        for i in 0..pods {
            per_node[rng.below(busy)].push(pod(i, &mut rng));
        }
    }
    let mut out = Vec::with_capacity(nodes);
    for (n, mut node_pods) in per_node.into_iter().enumerate() {
        let name = format!("node-{n:05}");
        let mut ds = NodePod {
            pod: Pod {
                namespace: daemon.namespace.clone(),
                name: format!("agent-{n}"),
                uid: format!("agent-{n:08}"),
                template: Arc::new(PodTemplate {
                    requests: daemon.requests.clone(),
                    ..PodTemplate::default()
                }),
                ..Pod::default()
            },
            daemon_set: true,
            ..NodePod::default()
        };
        ds.start_time = Some(NOW - 86_400);
        let cpu: i64 = node_pods
            .iter()
            .chain(std::iter::once(&ds))
            .map(|p| p.pod.requests.get("cpu").copied().unwrap_or(0))
            .sum();
        let memory: i64 = node_pods
            .iter()
            .chain(std::iter::once(&ds))
            .map(|p| p.pod.requests.get("memory").copied().unwrap_or(0))
            .sum();
        let utilization = 25 + rng.below(71) as i64;
        let ty = smallest_fitting(&types, cpu * 100 / utilization, memory * 100 / utilization);
        let zone = ZONES[n % ZONES.len()];
        let capacity_type = if rng.below(5) == 0 {
            "spot"
        } else {
            "on-demand"
        };
        let alloc = |k: &str| {
            ty.capacity.get(k).copied().unwrap_or(0)
                - ty.overhead.kube_reserved.get(k).copied().unwrap_or(0)
        };
        node_pods.push(ds);
        let empty = node_pods.len() == 1;
        out.push(ClusterNode {
            name: name.clone(),
            node_pool: Some("default".to_string()),
            labels: StringMap::from([
                (INSTANCE_TYPE.to_string(), ty.name.clone()),
                (ZONE.to_string(), zone.to_string()),
                (CAPACITY_TYPE.to_string(), capacity_type.to_string()),
                (HOSTNAME.to_string(), name),
                (NODE_POOL.to_string(), "default".to_string()),
                (ARCH.to_string(), "amd64".to_string()),
                (OS.to_string(), "linux".to_string()),
            ]),
            allocatable: StringMap::from([
                ("cpu".to_string(), alloc("cpu")),
                ("memory".to_string(), alloc("memory")),
                ("pods".to_string(), alloc("pods")),
            ]),
            pods: node_pods,
            initialized: true,
            created: NOW - 2 * 86_400,
            initialized_at: Some(NOW - 2 * 86_400 + 60),
            // Emptied seconds ago: within consolidateAfter.
            last_pod_event: Some(if empty { NOW - 5 } else { NOW - 3_600 }),
            ..ClusterNode::default()
        });
    }
    DisruptionSnapshot {
        now: NOW,
        node_pools: vec![DisruptionNodePool {
            pool: NodePool {
                name: "default".to_string(),
                instance_types: types.into(),
                ..NodePool::default()
            },
            consolidate_after: "30s".to_string(),
            budgets: vec![
                Budget {
                    nodes: "10%".to_string(),
                    ..Budget::default()
                },
                Budget {
                    nodes: "0".to_string(),
                    schedule: Some("0 0 * * sat".to_string()),
                    duration: Some("48h".to_string()),
                    reasons: vec![DisruptionReason::Drifted],
                },
            ],
            ..DisruptionNodePool::default()
        }],
        nodes: out,
        daemon_sets: vec![daemon],
        pdbs: vec![PodDisruptionBudget {
            namespace: "default".to_string(),
            name: "critical".to_string(),
            selector: Some(LabelSelector {
                match_labels: StringMap::from([("app".to_string(), "critical".to_string())]),
                match_expressions: Vec::new(),
            }),
            disruptions_allowed: 0,
            always_allow_unhealthy: false,
        }],
        ..DisruptionSnapshot::default()
    }
}
