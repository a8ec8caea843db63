//! Builders for test snapshots.
#![allow(clippy::unwrap_used)]
#![allow(dead_code)]

use std::collections::BTreeMap;

use engine::*;
use vocabulary::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};

pub const GI: i64 = 1 << 30;
pub const ZONES: [&str; 3] = ["zone-1", "zone-2", "zone-3"];

pub fn res(pairs: &[(&str, i64)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, op, values)
}

/// An instance type with `cpu` cores, `mem_gi` GiB, on-demand and spot in every
/// zone; spot at 70% of `price`.
pub fn it(name: &str, cpu: i64, mem_gi: i64, price: f64) -> InstanceType {
    let mut offerings = Vec::new();
    for z in ZONES {
        offerings.push(offering(z, "on-demand", price, true));
        offerings.push(offering(z, "spot", price * 0.7, true));
    }
    InstanceType {
        name: name.to_string(),
        requirements: vec![
            req(INSTANCE_TYPE, Operator::In, &[name]),
            req(ARCH, Operator::In, &["amd64"]),
            req(OS, Operator::In, &["linux"]),
            req(
                "karpenter.azure.com/sku-cpu",
                Operator::In,
                &[&cpu.to_string()],
            ),
        ],
        offerings,
        capacity: res(&[("cpu", cpu * 1000), ("memory", mem_gi * GI), ("pods", 110)]),
        overhead: Overhead {
            kube_reserved: res(&[("cpu", 100), ("memory", GI / 4)]),
            ..Overhead::default()
        },
        capacity_overlays: Vec::new(),
    }
}

pub fn offering(zone: &str, ct: &str, price: f64, available: bool) -> Offering {
    Offering {
        zone: Some(zone.to_string()),
        capacity_type: ct.to_string(),
        price,
        available,
        reservation_capacity: None,
        requirements: Vec::new(),
        price_overlay: None,
    }
}

pub fn with_offerings(mut t: InstanceType, offerings: Vec<Offering>) -> InstanceType {
    t.offerings = offerings;
    t
}

pub fn with_capacity(mut t: InstanceType, name: &str, amount: i64) -> InstanceType {
    t.capacity.insert(name.to_string(), amount);
    t
}

/// Standard_D{2,4,8,16,32}s_v5-like catalogue, price proportional to size.
/// The c, s and m families (2, 4 and 8 GiB a core, 1 to 256 cores) shaped
/// as Karpenter's KWOK catalog: $0.025 a core plus $1e-12 a byte,
/// kube-reserved 100m and 10Mi, 16 pods a core up to 1,024.
pub fn kwok_families() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (family, gib_per_core) in [("c", 2), ("s", 4), ("m", 8)] {
        for cores in [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256] {
            let mem = cores * gib_per_core * GI;
            let price = 0.025 * cores as f64 + mem as f64 * 1e-12;
            let mut t = it(
                &format!("{family}-{cores}x"),
                cores,
                cores * gib_per_core,
                price,
            );
            t.overhead.kube_reserved = res(&[("cpu", 100), ("memory", 10 << 20)]);
            t.capacity
                .insert("pods".to_string(), (cores * 16).min(1024));
            out.push(t);
        }
    }
    out
}

pub fn d_series() -> Vec<InstanceType> {
    [2, 4, 8, 16, 32]
        .iter()
        .map(|&c| it(&format!("Standard_D{c}s_v5"), c, c * 4, 0.048 * c as f64))
        .collect()
}

pub fn a100() -> InstanceType {
    let mut t = it("Standard_NC24ads_A100_v4", 24, 220, 3.67);
    t.capacity.insert("nvidia.com/gpu".into(), 1);
    t
}

pub fn pool(name: &str, types: Vec<InstanceType>) -> NodePool {
    NodePool {
        name: name.to_string(),
        instance_types: types.into(),
        ..NodePool::default()
    }
}

pub fn pod(name: &str, cpu_milli: i64, mem: i64) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        template: std::sync::Arc::new(PodTemplate {
            requests: res(&[("cpu", cpu_milli), ("memory", mem)]),
            ..PodTemplate::default()
        }),
        ..Pod::default()
    }
}

/// `n` pods of one template, as a Deployment's are: they share it.
/// `n` virtual pods of CapacityBuffer default/`name` (app `app`), as the
/// host makes them.
pub fn buffer_pods(name: &str, n: usize, cpu_milli: i64, app: &str) -> Vec<Pod> {
    let template = std::sync::Arc::new(PodTemplate {
        requests: res(&[("cpu", cpu_milli)]),
        labels: labels(&[("app", app)]),
        ..PodTemplate::default()
    });
    let b = engine::buffer::Buffer {
        namespace: "default",
        name,
        uid: name,
        creation: 0,
    };
    engine::buffer::virtual_pods(b, n as i32, template)
}

pub fn pods(prefix: &str, n: usize, cpu_milli: i64, mem: i64) -> Vec<Pod> {
    let one = pod(prefix, cpu_milli, mem);
    (0..n)
        .map(|i| Pod {
            name: format!("{prefix}-{i}"),
            uid: format!("uid-{prefix}-{i}"),
            creation: i as i64,
            ..one.clone()
        })
        .collect()
}

pub fn snapshot(node_pools: Vec<NodePool>, pods: Vec<Pod>) -> Snapshot {
    Snapshot {
        node_pools,
        pods,
        ..Snapshot::default()
    }
}

pub fn target_of<'a>(plan: &'a Plan, pod: &str) -> Option<&'a Target> {
    plan.placements
        .iter()
        .find(|p| p.pod.name == pod)
        .map(|p| &p.target)
}

pub fn claim_of<'a>(plan: &'a Plan, pod: &str) -> &'a NewNodeClaim {
    match target_of(plan, pod) {
        Some(Target::NewNodeClaim(i)) => &plan.new_node_claims[*i],
        other => panic!("{pod} is not on a new NodeClaim: {other:?}; plan: {plan:#?}"),
    }
}

pub fn reason_of<'a>(plan: &'a Plan, pod: &str) -> &'a str {
    plan.unschedulable
        .iter()
        .find(|u| u.pod.name == pod)
        .map(|u| u.reason.as_str())
        .unwrap_or_else(|| panic!("{pod} was scheduled: {plan:#?}"))
}

pub fn requirement<'a>(claim: &'a NewNodeClaim, key: &str) -> Option<&'a Requirement> {
    claim.requirements.iter().find(|r| r.key == key)
}

pub fn values<'a>(claim: &'a NewNodeClaim, key: &str) -> Vec<&'a str> {
    requirement(claim, key)
        .map(|r| r.values.iter().map(String::as_str).collect())
        .unwrap_or_default()
}

pub fn zone_of(claim: &NewNodeClaim) -> &str {
    let z = values(claim, ZONE);
    assert_eq!(z.len(), 1, "claim not narrowed to one zone: {claim:#?}");
    z[0]
}

pub fn capacity_types(claim: &NewNodeClaim) -> Vec<&str> {
    values(claim, CAPACITY_TYPE)
}

pub fn node(name: &str, cpu: i64, mem_gi: i64, labels_: &[(&str, &str)]) -> Node {
    Node {
        name: name.into(),
        labels: labels(labels_),
        allocatable: res(&[("cpu", cpu * 1000), ("memory", mem_gi * GI), ("pods", 110)]),
        initialized: true,
        ..Node::default()
    }
}

pub fn bound(name: &str, labels_: &[(&str, &str)]) -> BoundPod {
    BoundPod {
        namespace: "default".into(),
        name: name.into(),
        template: std::sync::Arc::new(PodTemplate {
            labels: labels(labels_),
            requests: res(&[("cpu", 100)]),
            ..PodTemplate::default()
        }),
    }
}

pub fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: labels(pairs),
        match_expressions: Vec::new(),
    })
}

pub fn spread(
    key: &str,
    skew: i32,
    sel: &[(&str, &str)],
    when: WhenUnsatisfiable,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew: skew,
        topology_key: key.into(),
        when_unsatisfiable: when,
        label_selector: selector(sel),
        min_domains: None,
        node_affinity_policy: NodeInclusionPolicy::Honor,
        node_taints_policy: NodeInclusionPolicy::Ignore,
        match_label_keys: Vec::new(),
    }
}

pub fn term(key: &str, sel: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: selector(sel),
        namespaces: Vec::new(),
        topology_key: key.into(),
    }
}

pub fn node_affinity(exprs: Vec<Requirement>) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required: vec![NodeSelectorTerm {
                match_expressions: exprs,
            }],
            preferred: Vec::new(),
        }),
        ..Affinity::default()
    }
}

pub fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
    Taint {
        key: key.into(),
        value: value.into(),
        effect,
    }
}

pub fn toleration(key: &str, value: &str) -> Toleration {
    Toleration {
        key: key.into(),
        operator: TolerationOperator::Equal,
        value: value.into(),
        effect: None,
    }
}

pub fn map<K: Ord, V>(pairs: Vec<(K, V)>) -> BTreeMap<K, V> {
    pairs.into_iter().collect()
}

/// A new NodeClaim's instance type names, cheapest first.
pub fn types<'a>(plan: &'a Plan, claim: &'a NewNodeClaim) -> Vec<&'a str> {
    plan.instance_type_names(claim).collect()
}

pub mod disruption;
