//! One scenario per feature, each with the plan a user would expect.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use engine::*;
use std::collections::BTreeMap;
use vocabulary::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};

const SKU_CPU: &str = "karpenter.azure.com/sku-cpu";

#[test]
fn five_inflate_pods_share_one_cheapest_node() {
    let plan = schedule(&snapshot(
        vec![pool("default", d_series())],
        pods("inflate", 5, 1000, 0),
    ));
    assert_eq!(plan.new_node_claims.len(), 1, "{plan:#?}");
    let claim = &plan.new_node_claims[0];
    assert_eq!(claim.pods.len(), 5);
    // 5 CPUs plus 100m overhead: an 8-core node is the smallest that fits.
    assert_eq!(
        types(&plan, claim),
        ["Standard_D8s_v5", "Standard_D16s_v5", "Standard_D32s_v5"]
    );
    let cheapest = claim.cheapest.as_ref().unwrap();
    assert_eq!(cheapest.instance_type, "Standard_D8s_v5");
    assert_eq!(cheapest.capacity_type, "spot");
    assert_eq!(claim.requests.get("cpu"), Some(&5000));
    assert_eq!(claim.requests.get("pods"), Some(&5));
    assert!(plan.unschedulable.is_empty());
    assert!((plan.total_price_per_hour() - 0.384 * 0.7).abs() < 1e-9);
}

fn gpu_pool() -> NodePool {
    let mut p = pool("gpu", vec![a100()]);
    p.taints = vec![taint("nvidia.com/gpu", "true", TaintEffect::NoSchedule)];
    p
}

fn gpu_pod(name: &str, gpus: i64) -> Pod {
    let mut p = pod(name, 1000, GI);
    p.requests.insert("nvidia.com/gpu".into(), gpus);
    p.tolerations = vec![toleration("nvidia.com/gpu", "true")];
    p.affinity = node_affinity(vec![req(
        INSTANCE_TYPE,
        Operator::In,
        &["Standard_NC24ads_A100_v4"],
    )]);
    p
}

#[test]
fn gpu_pod_lands_on_the_gpu_type_and_cpu_pods_do_not() {
    let mut all = pods("cpu", 2, 1000, GI);
    all.push(gpu_pod("gpu-0", 1));
    let plan = schedule(&snapshot(vec![pool("cpu", d_series()), gpu_pool()], all));
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    let gpu = claim_of(&plan, "gpu-0");
    assert_eq!(gpu.node_pool, "gpu");
    assert_eq!(types(&plan, gpu), ["Standard_NC24ads_A100_v4"]);
    assert_eq!(gpu.requests.get("nvidia.com/gpu"), Some(&1));
    for p in ["cpu-0", "cpu-1"] {
        let c = claim_of(&plan, p);
        assert_eq!(c.node_pool, "cpu");
        assert!(!types(&plan, c).contains(&"Standard_NC24ads_A100_v4"));
    }
}

#[test]
fn a_pod_nothing_can_host_says_why_for_each_pool() {
    let plan = schedule(&snapshot(
        vec![pool("cpu", d_series()), gpu_pool()],
        vec![gpu_pod("greedy", 2)],
    ));
    assert!(plan.new_node_claims.is_empty());
    let reason = reason_of(&plan, "greedy");
    assert!(
        reason.contains("incompatible with nodepool \"cpu\": requirement node.kubernetes.io/instance-type In [Standard_NC24ads_A100_v4] not met"),
        "{reason}"
    );
    assert!(
        reason.contains("incompatible with nodepool \"gpu\": no instance type has enough nvidia.com/gpu (requested 2, largest 1)"),
        "{reason}"
    );
}

#[test]
fn untolerated_taint_is_named() {
    let plan = schedule(&snapshot(vec![gpu_pool()], vec![pod("plain", 1000, 0)]));
    assert!(
        reason_of(&plan, "plain").contains("did not tolerate taint nvidia.com/gpu=true:NoSchedule"),
        "{plan:#?}"
    );
}

#[test]
fn a_pod_pinned_to_a_hostname_only_fits_that_node() {
    let mut pinned = pod("pinned", 500, 0);
    pinned.node_selector = labels(&[(HOSTNAME, "home")]);
    let mut s = snapshot(vec![pool("default", d_series())], vec![pinned]);
    let plan = schedule(&s);
    assert!(plan.new_node_claims.is_empty(), "{plan:#?}");
    assert!(
        reason_of(&plan, "pinned").contains(
            "requirement kubernetes.io/hostname In [home] not met: a new node's hostname is not known in advance"
        ),
        "{plan:#?}"
    );
    s.nodes = vec![node("home", 4, 16, &[(HOSTNAME, "home")])];
    let plan = schedule(&s);
    assert_eq!(
        target_of(&plan, "pinned"),
        Some(&Target::ExistingNode("home".into()))
    );
}

#[test]
fn heavier_nodepool_wins_even_when_pricier() {
    let pricey: Vec<InstanceType> = d_series()
        .into_iter()
        .map(|mut t| {
            t.name = format!("{}-premium", t.name);
            t.requirements[0] = req(INSTANCE_TYPE, Operator::In, &[&t.name.clone()]);
            for o in &mut t.offerings {
                o.price *= 10.0;
            }
            t
        })
        .collect();
    let mut cheap = pool("cheap", d_series());
    cheap.weight = 10;
    let mut premium = pool("premium", pricey);
    premium.weight = 50;
    let plan = schedule(&snapshot(
        vec![cheap.clone(), premium.clone()],
        vec![pod("p", 500, 0)],
    ));
    assert_eq!(claim_of(&plan, "p").node_pool, "premium");
    // Equal weights: by name.
    premium.weight = 10;
    let plan = schedule(&snapshot(vec![premium, cheap], vec![pod("p", 500, 0)]));
    assert_eq!(claim_of(&plan, "p").node_pool, "cheap");
}

#[test]
fn limits_are_pessimistic_and_explained() {
    let mut p = pool("small", d_series());
    p.limits = res(&[("cpu", 16_000)]);
    let plan = schedule(&snapshot(vec![p], pods("big", 3, 6000, 0)));
    assert_eq!(plan.new_node_claims.len(), 1, "{plan:#?}");
    let claim = &plan.new_node_claims[0];
    // D32 exceeds the limit; two 6-CPU pods fit the D16.
    assert_eq!(types(&plan, claim), ["Standard_D16s_v5"]);
    assert_eq!(claim.pods.len(), 2);
    assert_eq!(
        reason_of(&plan, "big-2"),
        "incompatible with nodepool \"small\": all available instance types exceed the nodepool's limits: cpu"
    );
}

#[test]
fn nodes_limit_counts_existing_nodes() {
    let mut p = pool("few", d_series());
    p.limits = res(&[("nodes", 2)]);
    let mut existing = node("old", 2, 8, &[("karpenter.sh/nodepool", "few")]);
    existing.node_pool = Some("few".into());
    existing.allocatable = res(&[("cpu", 100), ("memory", GI), ("pods", 110)]);
    let mut s = snapshot(vec![p], Vec::new());
    s.nodes = vec![existing];
    for i in 0..2 {
        let mut x = pod(&format!("anti-{i}"), 500, 0);
        x.labels = labels(&[("app", "solo")]);
        x.affinity.pod_anti_affinity = Some(PodAffinity {
            required: vec![term(HOSTNAME, &[("app", "solo")])],
            preferred: Vec::new(),
        });
        s.pods.push(x);
    }
    let plan = schedule(&s);
    assert_eq!(plan.new_node_claims.len(), 1);
    assert!(
        reason_of(&plan, "anti-1").contains("nodes limit is reached"),
        "{plan:#?}"
    );
}

fn min_values_pool() -> NodePool {
    let mut p = pool("diverse", d_series());
    let mut r = req(INSTANCE_TYPE, Operator::Exists, &[]);
    r.min_values = Some(3);
    p.requirements = vec![r];
    p
}

#[test]
fn min_values_keeps_enough_types_or_refuses() {
    let plan = schedule(&snapshot(
        vec![min_values_pool()],
        vec![pod("small", 1000, 0)],
    ));
    let claim = claim_of(&plan, "small");
    assert_eq!(types(&plan, claim).len(), 5);
    assert_eq!(claim.instance_type_min_values, Some(3));
    let full = plan.node_claim_requirements(claim);
    let it = full.iter().find(|r| r.key == INSTANCE_TYPE).unwrap();
    assert_eq!((it.values.len(), it.min_values), (5, Some(3)));

    // Only D16 and D32 hold 10 CPUs: two types, three required.
    let plan = schedule(&snapshot(
        vec![min_values_pool()],
        vec![pod("large", 10_000, 0)],
    ));
    assert!(reason_of(&plan, "large").contains("minValues"), "{plan:#?}");

    let mut s = snapshot(vec![min_values_pool()], vec![pod("large", 10_000, 0)]);
    s.options.min_values_policy = MinValuesPolicy::BestEffort;
    let plan = schedule(&s);
    let claim = claim_of(&plan, "large");
    assert_eq!(types(&plan, claim).len(), 2);
    assert_eq!(claim.instance_type_min_values, Some(2));
}

#[test]
fn unavailable_offerings_are_skipped() {
    let d2 = d_series().remove(0);
    let d2 = with_offerings(
        d2,
        vec![
            offering("zone-1", "spot", 0.05, false),
            offering("zone-1", "on-demand", 0.096, true),
        ],
    );
    let d4 = with_offerings(
        d_series().remove(1),
        vec![
            offering("zone-2", "spot", 0.1, true),
            offering("zone-1", "on-demand", 0.192, true),
        ],
    );
    let mut wants_spot = pod("spot", 500, 0);
    wants_spot.node_selector = labels(&[(CAPACITY_TYPE, "spot")]);
    let mut spot_in_zone1 = pod("spot-zone-1", 400, 0);
    spot_in_zone1.node_selector = labels(&[(CAPACITY_TYPE, "spot"), (ZONE, "zone-1")]);
    let plan = schedule(&snapshot(
        vec![pool("default", vec![d2, d4])],
        vec![wants_spot, spot_in_zone1, pod("any", 300, 0)],
    ));
    let claim = claim_of(&plan, "spot");
    assert_eq!(types(&plan, claim), ["Standard_D4s_v5"]);
    assert_eq!(capacity_types(claim), ["spot"]);
    assert_eq!(zone_of(claim), "zone-2");
    assert!(
        reason_of(&plan, "spot-zone-1").contains("no available offering"),
        "{plan:#?}"
    );
    // The unconstrained pod joins the existing claim rather than opening one.
    assert!(matches!(
        target_of(&plan, "any"),
        Some(Target::NewNodeClaim(0))
    ));
}

#[test]
fn preferences_are_required_first_then_relaxed() {
    let preferred = |name: &str, zone: &str| {
        let mut p = pod(name, 500, 0);
        p.affinity.node_affinity = Some(NodeAffinity {
            required: Vec::new(),
            preferred: vec![PreferredSchedulingTerm {
                weight: 10,
                preference: NodeSelectorTerm {
                    match_expressions: vec![req(ZONE, Operator::In, &[zone])],
                },
            }],
        });
        p
    };
    let s = snapshot(
        vec![pool("default", d_series())],
        vec![preferred("honored", "zone-3"), preferred("relaxed", "mars")],
    );
    let plan = schedule(&s);
    assert_eq!(zone_of(claim_of(&plan, "honored")), "zone-3");
    assert!(target_of(&plan, "relaxed").is_some());

    let mut ignore = s.clone();
    ignore.options.preference_policy = PreferencePolicy::Ignore;
    let plan = schedule(&ignore);
    assert_eq!(values(claim_of(&plan, "honored"), ZONE).len(), 3);
}

#[test]
fn required_terms_are_ored_in_order() {
    let mut p = pod("either", 500, 0);
    p.affinity.node_affinity = Some(NodeAffinity {
        required: vec![
            NodeSelectorTerm {
                match_expressions: vec![req(ZONE, Operator::In, &["mars"])],
            },
            NodeSelectorTerm {
                match_expressions: vec![req(ZONE, Operator::In, &["zone-2"])],
            },
        ],
        preferred: Vec::new(),
    });
    let plan = schedule(&snapshot(vec![pool("default", d_series())], vec![p]));
    assert_eq!(zone_of(claim_of(&plan, "either")), "zone-2");
}

#[test]
fn prefer_no_schedule_taint_is_avoided_until_relaxed() {
    let mut soft = pool("soft", d_series());
    soft.weight = 50;
    soft.taints = vec![taint("spare", "", TaintEffect::PreferNoSchedule)];
    let plain = pool("plain", d_series());
    let plan = schedule(&snapshot(vec![soft.clone(), plain], vec![pod("p", 500, 0)]));
    assert_eq!(claim_of(&plan, "p").node_pool, "plain");
    // Alone, the tainted pool is used once the taint is tolerated.
    let plan = schedule(&snapshot(vec![soft], vec![pod("p", 500, 0)]));
    assert_eq!(claim_of(&plan, "p").node_pool, "soft");
}

fn cheapest_for(op: Operator, values_: &[&str], cpu_milli: i64) -> Result<String, String> {
    let mut p = pod("p", cpu_milli, 0);
    p.affinity = node_affinity(vec![req(SKU_CPU, op, values_)]);
    let plan = schedule(&snapshot(vec![pool("default", d_series())], vec![p]));
    match plan.new_node_claims.first() {
        Some(c) => Ok(c.cheapest.as_ref().unwrap().instance_type.clone()),
        None => Err(plan.unschedulable[0].reason.clone()),
    }
}

#[test]
fn every_requirement_operator() {
    let ok = |s: &str| Ok::<String, String>(s.to_string());
    assert_eq!(
        cheapest_for(Operator::In, &["16"], 500),
        ok("Standard_D16s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::NotIn, &["2", "4"], 500),
        ok("Standard_D8s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::Exists, &[], 500),
        ok("Standard_D2s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::Gt, &["8"], 500),
        ok("Standard_D16s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::Gte, &["8"], 500),
        ok("Standard_D8s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::Lt, &["4"], 500),
        ok("Standard_D2s_v5")
    );
    assert_eq!(
        cheapest_for(Operator::Lte, &["4"], 3000),
        ok("Standard_D4s_v5")
    );
    assert!(cheapest_for(Operator::Lt, &["4"], 3000).is_err());
    let err = cheapest_for(Operator::DoesNotExist, &[], 500).unwrap_err();
    assert!(
        err.contains("karpenter.azure.com/sku-cpu DoesNotExist"),
        "{err}"
    );
}

#[test]
fn undefined_custom_label_cannot_be_required() {
    let mut p = pod("p", 500, 0);
    p.node_selector = labels(&[("team", "blue")]);
    let plan = schedule(&snapshot(
        vec![pool("default", d_series())],
        vec![p.clone()],
    ));
    assert!(reason_of(&plan, "p").contains("no instance type defines label team"));
    let mut blue = pool("blue", d_series());
    blue.labels = labels(&[("team", "blue")]);
    let plan = schedule(&snapshot(vec![blue], vec![p]));
    assert_eq!(values(claim_of(&plan, "p"), "team"), ["blue"]);
}

#[test]
fn existing_nodes_are_used_first_in_order() {
    let mut s = snapshot(vec![pool("default", d_series())], pods("p", 1, 1500, 0));
    let mut b = node("b-node", 4, 16, &[]);
    b.pods = vec![bound("resident", &[])];
    let a = node("a-node", 1, 4, &[]);
    let mut tainted = node("0-tainted", 8, 32, &[]);
    tainted.taints = vec![taint("dedicated", "db", TaintEffect::NoSchedule)];
    s.nodes = vec![b, a, tainted];
    let plan = schedule(&s);
    assert!(plan.new_node_claims.is_empty());
    assert_eq!(
        target_of(&plan, "p-0"),
        Some(&Target::ExistingNode("b-node".into()))
    );
}

#[test]
fn startup_taints_do_not_block_in_flight_nodeclaims() {
    let mut p = pool("default", d_series());
    let startup = taint(
        "node.cilium.io/agent-not-ready",
        "true",
        TaintEffect::NoExecute,
    );
    p.startup_taints = vec![startup.clone()];
    let mut s = snapshot(vec![p], pods("p", 1, 500, 0));
    let mut flight = node("in-flight", 4, 16, &[]);
    flight.initialized = false;
    flight.in_flight = true;
    flight.node_pool = Some("default".into());
    flight.taints = vec![
        startup,
        taint("karpenter.sh/unregistered", "", TaintEffect::NoExecute),
    ];
    s.nodes = vec![flight];
    let plan = schedule(&s);
    assert_eq!(
        target_of(&plan, "p-0"),
        Some(&Target::ExistingNode("in-flight".into()))
    );
}

/// A node that just registered is NotReady for a moment; the not-ready
/// taint it carries then is Karpenter's "known ephemeral" kind and does not
/// send its pods to a new NodeClaim. Once initialized, the same taint counts.
#[test]
fn ephemeral_taints_only_block_initialized_nodes() {
    let plan_for = |initialized: bool| {
        let mut s = snapshot(vec![pool("default", d_series())], pods("p", 1, 500, 0));
        let mut n = node("starting", 4, 16, &[]);
        n.initialized = initialized;
        n.node_pool = Some("default".into());
        n.taints = vec![
            taint("node.kubernetes.io/not-ready", "", TaintEffect::NoSchedule),
            taint(
                "node.kubernetes.io/unreachable",
                "",
                TaintEffect::NoSchedule,
            ),
            taint(
                "node.cloudprovider.kubernetes.io/uninitialized",
                "true",
                TaintEffect::NoSchedule,
            ),
        ];
        s.nodes = vec![n];
        schedule(&s)
    };
    let starting = plan_for(false);
    assert!(starting.new_node_claims.is_empty());
    assert_eq!(
        target_of(&starting, "p-0"),
        Some(&Target::ExistingNode("starting".into()))
    );
    let broken = plan_for(true);
    assert_eq!(broken.new_node_claims.len(), 1);
}

#[test]
fn daemonset_overhead_is_added_to_new_nodeclaims() {
    let ds = DaemonSet {
        namespace: "kube-system".into(),
        name: "agent".into(),
        requests: res(&[("cpu", 1000)]),
        ..DaemonSet::default()
    };
    let other_arch = DaemonSet {
        name: "arm-only".into(),
        requests: res(&[("cpu", 8000)]),
        node_selector: labels(&[("kubernetes.io/arch", "arm64")]),
        ..ds.clone()
    };
    // Daemonsets are matched against the NodePool's requirements.
    let mut amd = pool("default", d_series());
    amd.requirements = vec![req("kubernetes.io/arch", Operator::In, &["amd64"])];
    let mut s = snapshot(vec![amd], vec![pod("p", 3000, 0)]);
    let plan = schedule(&s);
    assert_eq!(types(&plan, claim_of(&plan, "p"))[0], "Standard_D4s_v5");
    s.daemon_sets = vec![ds, other_arch];
    let plan = schedule(&s);
    let claim = claim_of(&plan, "p");
    assert_eq!(types(&plan, claim)[0], "Standard_D8s_v5");
    assert_eq!(claim.requests.get("cpu"), Some(&4000));
}

fn spread_pods(n: usize, key: &str) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("web-{i}"), 500, 0);
            p.creation = i as i64;
            p.labels = labels(&[("app", "web")]);
            p.topology_spread_constraints = vec![spread(
                key,
                1,
                &[("app", "web")],
                WhenUnsatisfiable::DoNotSchedule,
            )];
            p
        })
        .collect()
}

#[test]
fn zonal_spread_uses_every_zone() {
    let plan = schedule(&snapshot(
        vec![pool("default", d_series())],
        spread_pods(4, ZONE),
    ));
    let mut zones: Vec<&str> = (0..4)
        .map(|i| zone_of(claim_of(&plan, &format!("web-{i}"))))
        .collect();
    zones.sort();
    assert_eq!(zones, ["zone-1", "zone-1", "zone-2", "zone-3"]);
}

#[test]
fn zonal_spread_counts_existing_pods() {
    let mut s = snapshot(vec![pool("default", d_series())], spread_pods(2, ZONE));
    let mut n = node("full-zone-1", 1, 1, &[(ZONE, "zone-1")]);
    n.pods = vec![bound("old-web", &[("app", "web")])];
    s.nodes = vec![n];
    let plan = schedule(&s);
    let mut zones: Vec<&str> = (0..2)
        .map(|i| zone_of(claim_of(&plan, &format!("web-{i}"))))
        .collect();
    zones.sort();
    assert_eq!(zones, ["zone-2", "zone-3"]);
}

fn zones_of_spread_pods(plan: &Plan, n: usize) -> Vec<&str> {
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    let mut zones: Vec<&str> = (0..n)
        .map(|i| zone_of(claim_of(plan, &format!("web-{i}"))))
        .collect();
    zones.sort();
    zones
}

#[test]
fn zonal_spread_ignores_zones_its_nodepool_excludes() {
    // The instance types are offered in three zones, the NodePool allows two:
    // the third can never hold a node, so it is no domain.
    let mut p = pool("default", d_series());
    p.requirements = vec![req(ZONE, Operator::In, &["zone-1", "zone-2"])];
    let plan = schedule(&snapshot(vec![p], spread_pods(4, ZONE)));
    assert_eq!(
        zones_of_spread_pods(&plan, 4),
        ["zone-1", "zone-1", "zone-2", "zone-2"]
    );
}

#[test]
fn zonal_spread_ignores_zones_offered_only_as_a_refused_capacity_type() {
    // Spot in two zones, on-demand in three (Karpenter's benchmark catalogue),
    // and a spot-only NodePool: zone-3 is no domain.
    let types = d_series()
        .into_iter()
        .map(|t| {
            let price = t.offerings[0].price;
            let mut offerings: Vec<Offering> = ZONES
                .iter()
                .map(|z| offering(z, "on-demand", price, true))
                .collect();
            offerings.push(offering("zone-1", "spot", price * 0.7, true));
            offerings.push(offering("zone-2", "spot", price * 0.7, true));
            with_offerings(t, offerings)
        })
        .collect();
    let mut p = pool("spot", types);
    p.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["spot"])];
    let plan = schedule(&snapshot(vec![p], spread_pods(4, ZONE)));
    assert_eq!(
        zones_of_spread_pods(&plan, 4),
        ["zone-1", "zone-1", "zone-2", "zone-2"]
    );
}

#[test]
fn zonal_spread_has_no_domain_where_nothing_can_be() {
    // The smallest case the constraint property once flagged: the only zone
    // a node is in, or any NodePool can launch in, is zone-1 (the pool has no
    // instance types), so zone-2 and zone-3 are no domains and zone-1 may
    // hold every pod. Kubernetes agrees: a domain needs a node.
    let mut s = snapshot(vec![pool("empty", Vec::new())], spread_pods(2, ZONE));
    let mut n = node("node-0", 4, 8, &[(ZONE, "zone-1"), (HOSTNAME, "node-0")]);
    n.pods = vec![bound("old-web", &[("app", "web")])];
    s.nodes = vec![n];
    let plan = schedule(&s);
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    for i in 0..2 {
        assert_eq!(
            target_of(&plan, &format!("web-{i}")),
            Some(&Target::ExistingNode("node-0".into()))
        );
    }
}

#[test]
fn hostname_spread_and_anti_affinity_need_separate_nodes() {
    let plan = schedule(&snapshot(
        vec![pool("default", d_series())],
        spread_pods(3, HOSTNAME),
    ));
    assert_eq!(plan.new_node_claims.len(), 3);

    let anti: Vec<Pod> = (0..3)
        .map(|i| {
            let mut p = pod(&format!("db-{i}"), 500, 0);
            p.labels = labels(&[("app", "db")]);
            p.affinity.pod_anti_affinity = Some(PodAffinity {
                required: vec![term(HOSTNAME, &[("app", "db")])],
                preferred: Vec::new(),
            });
            p
        })
        .collect();
    let mut all = anti;
    all.extend(pods("filler", 3, 100, 0));
    let plan = schedule(&snapshot(vec![pool("default", d_series())], all));
    assert_eq!(plan.new_node_claims.len(), 3, "{plan:#?}");
    for c in &plan.new_node_claims {
        assert_eq!(
            plan.pods_of(c)
                .filter(|p| p.name.starts_with("db-"))
                .count(),
            1
        );
    }
}

#[test]
fn pod_affinity_follows_existing_pods_zone() {
    let mut s = snapshot(vec![pool("default", d_series())], Vec::new());
    let mut n = node("db-node", 1, 1, &[(ZONE, "zone-2")]);
    n.pods = vec![bound("db", &[("app", "db")])];
    s.nodes = vec![n];
    let mut p = pod("client", 2000, 0);
    p.affinity.pod_affinity = Some(PodAffinity {
        required: vec![term(ZONE, &[("app", "db")])],
        preferred: Vec::new(),
    });
    s.pods = vec![p];
    let plan = schedule(&s);
    assert_eq!(zone_of(claim_of(&plan, "client")), "zone-2");
}

#[test]
fn existing_pods_anti_affinity_keeps_new_pods_away() {
    let mut s = snapshot(vec![pool("default", d_series())], Vec::new());
    let mut loner = bound("loner", &[("app", "loner")]);
    loner.affinity.pod_anti_affinity = Some(PodAffinity {
        required: vec![term(ZONE, &[("app", "web")])],
        preferred: Vec::new(),
    });
    let mut n = node("big", 16, 64, &[(ZONE, "zone-1")]);
    n.pods = vec![loner];
    s.nodes = vec![n];
    let mut web = pod("web", 500, 0);
    web.labels = labels(&[("app", "web")]);
    s.pods = vec![web, pod("other", 500, 0)];
    let plan = schedule(&s);
    assert_eq!(
        target_of(&plan, "other"),
        Some(&Target::ExistingNode("big".into()))
    );
    assert_ne!(zone_of(claim_of(&plan, "web")), "zone-1");
}

#[test]
fn host_ports_conflict() {
    let with_port = |name: &str, port: u16| {
        let mut p = pod(name, 100, 0);
        p.host_ports = vec![HostPort {
            port,
            protocol: String::new(),
            host_ip: String::new(),
        }];
        p
    };
    let plan = schedule(&snapshot(
        vec![pool("default", d_series())],
        vec![with_port("a", 80), with_port("b", 80), with_port("c", 443)],
    ));
    assert_eq!(plan.new_node_claims.len(), 2, "{plan:#?}");
    assert_ne!(target_of(&plan, "a"), target_of(&plan, "b"));
}

#[test]
fn shuffled_input_gives_the_same_plan() {
    let mut all = pods("cpu", 4, 1000, GI);
    all.push(gpu_pod("gpu-0", 1));
    all.extend(spread_pods(4, ZONE));
    let s = snapshot(vec![pool("cpu", d_series()), gpu_pool()], all);
    let mut r = s.clone();
    r.pods.reverse();
    r.node_pools.reverse();
    for p in &mut r.node_pools {
        let types = std::sync::Arc::make_mut(&mut p.instance_types);
        types.reverse();
        for t in types {
            t.offerings.reverse();
        }
    }
    let a = serde_json::to_string(&schedule(&s)).unwrap();
    let b = serde_json::to_string(&schedule(&r)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn benchmark_snapshot_schedules_every_pod() {
    let s = bench::scheduling_snapshot(500, 400);
    let plan = schedule(&s);
    assert!(
        plan.unschedulable.is_empty(),
        "{:?}",
        plan.unschedulable.first()
    );
    assert_eq!(plan.placements.len(), 500);
    // 100 hostname anti-affinity pods need 100 nodes at least.
    assert!(plan.new_node_claims.len() >= 100);
}

#[test]
fn prepared_snapshots_can_be_scheduled_again() {
    // What a disruption simulation does: the same cluster without a node, its
    // pods pending again.
    let mut s = snapshot(vec![pool("default", d_series())], Vec::new());
    let mut keep = node("keep", 4, 16, &[]);
    keep.pods = vec![bound("stays", &[])];
    s.nodes = vec![keep, node("remove-me", 4, 16, &[])];
    s.pods = pods("evicted", 2, 1000, GI);
    let prepared = Prepared::new(&s);
    let first = schedule_prepared(&prepared);
    assert_eq!(first, schedule_prepared(&prepared));
    assert_eq!(first, schedule(&s));
    assert!(first.new_node_claims.is_empty());
    assert!(
        first
            .placements
            .iter()
            .all(|p| p.target == Target::ExistingNode("keep".into()))
    );
}

/// The AKS Flex guide's Nebius pools: the CPU pool requires `sku-cpu Gt 8`,
/// a label GPU types do not carry, so a GPU pod that pins a GPU type goes to
/// the GPU pool even when both pools would take it.
#[test]
fn a_pool_requirement_on_a_label_a_type_lacks_excludes_that_type() {
    let mut gpu_type = it("gpu-h100-sxm-8gpu-128vcpu-1600gb", 128, 1600, 23.5);
    gpu_type.requirements.retain(|r| r.key != SKU_CPU);
    gpu_type.capacity.insert("nvidia.com/gpu".into(), 8);
    let cpu_type = it("cpu-d3-16vcpu-64gb", 16, 64, 0.4);
    let mut cpu = pool("cpu", vec![cpu_type.clone(), gpu_type.clone()]);
    cpu.requirements = vec![req(SKU_CPU, Operator::Gt, &["8"])];
    let gpu = pool("gpu", vec![cpu_type, gpu_type]);
    let mut p = pod("gpu-0", 4000, GI);
    p.requests.insert("nvidia.com/gpu".into(), 1);
    p.affinity = node_affinity(vec![req(
        INSTANCE_TYPE,
        Operator::In,
        &["gpu-h100-sxm-8gpu-128vcpu-1600gb"],
    )]);
    let plan = schedule(&snapshot(vec![cpu.clone(), gpu], vec![p.clone()]));
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    let g = claim_of(&plan, "gpu-0");
    assert_eq!(g.node_pool, "gpu", "{plan:#?}");
    assert_eq!(types(&plan, g), ["gpu-h100-sxm-8gpu-128vcpu-1600gb"]);
    // The CPU pool alone cannot host it.
    let plan = schedule(&snapshot(vec![cpu], vec![p]));
    assert!(plan.new_node_claims.is_empty(), "{plan:#?}");
    assert_eq!(plan.unschedulable.len(), 1);
}

#[test]
fn a_pod_held_back_by_unavailable_offerings_is_told_so_not_that_nothing_is_large_enough() {
    let d2 = d_series().remove(0);
    let d4 = with_offerings(
        d_series().remove(1),
        vec![offering("zone-1", "on-demand", 0.192, false)],
    );
    let plan = schedule(&snapshot(
        vec![pool("default", vec![d2, d4])],
        vec![pod("big", 3000, 0)],
    ));
    let why = reason_of(&plan, "big");
    assert!(
        why.contains("the instance types that fit (Standard_D4s_v5) have no available offering"),
        "{why}"
    );
    assert!(!why.contains("enough cpu"), "{why}");
}

/// Families of 2, 4 and 8 GiB per core, from 1 to 256 cores.
fn families() -> Vec<InstanceType> {
    let mut out = Vec::new();
    for (family, gib_per_core) in [("c", 2), ("s", 4), ("m", 8)] {
        for cores in [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256] {
            let gib = cores * gib_per_core;
            let price = cores as f64 * 0.025 + gib as f64 * 0.003;
            out.push(it(&format!("{family}-{cores}x"), cores, gib, price));
        }
    }
    out
}

#[test]
fn pods_planned_again_keep_to_the_nodes_made_for_them() {
    let mut all = pods("large", 125, 3500, 28 * GI);
    all.extend(pods("small", 125, 900, 3100 << 20));
    all.extend(pods("tiny", 25, 900, 450 << 20));
    let first = schedule(&snapshot(vec![pool("default", families())], all.clone()));
    assert!(first.unschedulable.is_empty(), "{first:#?}");
    assert!(first.new_node_claims.len() > 1, "{first:#?}");

    // The next batch sees the NodeClaims in flight, the smallest first by
    // name: placed first-fit, the largest pods fill its memory and leave
    // its cores idle, and what the other nodes cannot take needs a new one.
    let count = first.new_node_claims.len();
    let mut nodes = Vec::new();
    let mut nominated = BTreeMap::new();
    for (i, claim) in first.new_node_claims.iter().enumerate() {
        let name = format!("claim-{}", count - i);
        let ty = &claim.cheapest.as_ref().unwrap().instance_type;
        let t = families().into_iter().find(|t| &t.name == ty).unwrap();
        nodes.push(Node {
            name: name.clone(),
            allocatable: t.allocatable(),
            capacity: Some(t.capacity.clone()),
            node_pool: Some("default".into()),
            in_flight: true,
            ..Node::default()
        });
        for &p in &claim.pods {
            nominated.insert(first.placements[p as usize].pod.name.clone(), name.clone());
        }
    }
    for p in &mut all {
        p.nominated_node = nominated.get(&p.name).cloned();
    }
    let mut again = snapshot(vec![pool("default", families())], all);
    again.nodes = nodes;
    let plan = schedule(&again);
    assert!(plan.new_node_claims.is_empty(), "{plan:#?}");
    assert!(plan.unschedulable.is_empty(), "{plan:#?}");
    for p in &plan.placements {
        assert_eq!(
            p.target,
            Target::ExistingNode(nominated[&p.pod.name].clone()),
            "{}",
            p.pod.name
        );
    }
}
