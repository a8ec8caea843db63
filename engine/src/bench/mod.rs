//! Karpenter's scheduling benchmark, reproduced as a [`Snapshot`] generator
//! (see `scheduling_benchmark_test.go` and the fake cloud provider in Karpenter),
//! and a consolidatable cluster for the disruption benchmark (`disruption`).
//!
//! Deterministic: draws come from splitmix64 seeded with 42.

mod disruption;

pub use disruption::disruption_snapshot;

use crate::map::StringMap;
use std::sync::Arc;

use crate::snapshot::{
    Affinity, InstanceType, LabelSelector, NodePool, Offering, Operator, Overhead, Pod,
    PodAffinity, PodAffinityTerm, PodTemplate, Requirement, Snapshot, TopologySpreadConstraint,
    WhenUnsatisfiable,
};
use vocabulary::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, OS, ZONE};

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

/// The splitmix64 generator: tiny, fast and good enough for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Instance type `fake-it-<i>` of the benchmark: `i+1` CPUs, `2(i+1)` GiB,
/// `10(i+1)` pods, five available offerings.
pub fn instance_type(i: usize) -> InstanceType {
    let cpu = i as i64 + 1;
    let memory = 2 * cpu * GI;
    let name = format!("fake-it-{i}");
    let price = 0.1 * cpu as f64 + 0.1 * memory as f64 / 1e9;
    let size = if cpu > 4 && memory > 8 * GI {
        "large"
    } else {
        "small"
    };
    let offerings = [
        ("spot", "test-zone-1"),
        ("spot", "test-zone-2"),
        ("on-demand", "test-zone-1"),
        ("on-demand", "test-zone-2"),
        ("on-demand", "test-zone-3"),
    ]
    .iter()
    .map(|(ct, zone)| Offering {
        zone: Some(zone.to_string()),
        capacity_type: ct.to_string(),
        price,
        available: true,
        reservation_capacity: None,
        requirements: Vec::new(),
        price_overlay: None,
    })
    .collect();
    InstanceType {
        name: name.clone(),
        requirements: vec![
            Requirement::new(INSTANCE_TYPE, Operator::In, &[&name]),
            Requirement::new(ARCH, Operator::In, &["amd64"]),
            Requirement::new(OS, Operator::In, &["linux", "windows", "darwin"]),
            Requirement::new(
                ZONE,
                Operator::In,
                &["test-zone-1", "test-zone-2", "test-zone-3"],
            ),
            Requirement::new(CAPACITY_TYPE, Operator::In, &["spot", "on-demand"]),
            Requirement::new("size", Operator::In, &[size]),
        ],
        offerings,
        capacity: StringMap::from([
            ("cpu".to_string(), cpu * 1000),
            ("memory".to_string(), memory),
            ("pods".to_string(), 10 * cpu),
        ]),
        overhead: Overhead {
            kube_reserved: StringMap::from([
                ("cpu".to_string(), 100),
                ("memory".to_string(), 10 * MI),
            ]),
            ..Overhead::default()
        },
        capacity_overlays: Vec::new(),
    }
}

fn selector(key: &str, value: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: StringMap::from([(key.to_string(), value.to_string())]),
        match_expressions: Vec::new(),
    })
}

fn spread(key: &str, value: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_string(),
        when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
        label_selector: selector("my-label", value),
        min_domains: None,
        node_affinity_policy: Default::default(),
        node_taints_policy: crate::snapshot::NodeInclusionPolicy::Ignore,
        match_label_keys: Vec::new(),
    }
}

fn affinity_term(key: &str, value: &str, topology_key: &str) -> PodAffinity {
    PodAffinity {
        required: vec![PodAffinityTerm {
            label_selector: selector(key, value),
            namespaces: Vec::new(),
            topology_key: topology_key.to_string(),
        }],
        preferred: Vec::new(),
    }
}

/// The benchmark's snapshot: one NodePool over `instance_types` fake types and
/// `pods` pending pods of five kinds (generic, zonal spread, hostname spread,
/// zonal self-affinity, hostname anti-affinity). Every pod can schedule.
pub fn scheduling_snapshot(pods: usize, instance_types: usize) -> Snapshot {
    let mut rng = SplitMix64::new(42);
    const LETTERS: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
    const CPUS: [i64; 5] = [100, 250, 500, 1000, 1500];
    const MEMS: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
    let per_kind = pods / 5;
    let generic = pods - 4 * per_kind;
    let mut out = Vec::with_capacity(pods);
    for i in 0..pods {
        let kind = if i < generic {
            0
        } else {
            1 + (i - generic) / per_kind.max(1)
        };
        let cpu = *rng.pick(&CPUS);
        let memory = *rng.pick(&MEMS) * MI;
        let mut pod = Pod {
            namespace: "default".to_string(),
            name: format!("pod-{i}"),
            uid: format!("uid-{i:08}"),
            creation: i as i64,
            buffer: None,
            nominated_node: None,
            template: Arc::new(PodTemplate {
                requests: StringMap::from([
                    ("cpu".to_string(), cpu),
                    ("memory".to_string(), memory),
                ]),
                ..PodTemplate::default()
            }),
        };
        let label = |pod: &mut Pod, key: &str, value: &str| {
            pod.labels.insert(key.to_string(), value.to_string());
        };
        match kind {
            0 => label(&mut pod, "my-label", LETTERS[rng.below(LETTERS.len())]),
            1 | 2 => {
                label(&mut pod, "my-label", LETTERS[rng.below(LETTERS.len())]);
                let key = if kind == 1 { ZONE } else { HOSTNAME };
                pod.topology_spread_constraints =
                    vec![spread(key, LETTERS[rng.below(LETTERS.len())])];
            }
            3 => {
                let v = LETTERS[rng.below(LETTERS.len())];
                label(&mut pod, "my-affininity", v);
                pod.affinity = Affinity {
                    pod_affinity: Some(affinity_term("my-affininity", v, ZONE)),
                    ..Affinity::default()
                };
            }
            _ => {
                label(&mut pod, "app", "nginx");
                pod.affinity = Affinity {
                    pod_anti_affinity: Some(affinity_term("app", "nginx", HOSTNAME)),
                    ..Affinity::default()
                };
            }
        }
        out.push(pod);
    }
    Snapshot {
        node_pools: vec![NodePool {
            name: "default".to_string(),
            limits: StringMap::from([
                ("cpu".to_string(), 10_000_000 * 1000),
                ("memory".to_string(), 10_000_000 * GI),
            ]),
            instance_types: (0..instance_types).map(instance_type).collect(),
            ..NodePool::default()
        }],
        pods: out,
        ..Snapshot::default()
    }
}
