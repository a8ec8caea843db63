//! Properties every disruption decision must have, checked on random clusters
//! by code that does not share the engine's internals.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::disruption::*;
use common::*;
use engine::bench::SplitMix64;
use engine::disruption::*;
use engine::*;
use proptest::prelude::*;
use vocabulary::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, ZONE};

const APPS: [&str; 4] = ["a", "b", "c", "d"];
/// Budget windows whose state at `NOW` (12:00 UTC) the checks know.
const OPEN: (&str, &str) = ("0 9 * * *", "8h");
const CLOSED: (&str, &str) = ("0 20 * * *", "2h");

fn random_budget(rng: &mut SplitMix64) -> Budget {
    let nodes = match rng.below(4) {
        0 => "0".to_string(),
        1 => (1 + rng.below(3)).to_string(),
        2 => format!("{}%", [10, 34, 50, 100][rng.below(4)]),
        _ => "1".to_string(),
    };
    let (schedule, duration) = match rng.below(4) {
        0 => (Some(OPEN.0.to_string()), Some(OPEN.1.to_string())),
        1 => (Some(CLOSED.0.to_string()), Some(CLOSED.1.to_string())),
        _ => (None, None),
    };
    let all = [
        DisruptionReason::Underutilized,
        DisruptionReason::Empty,
        DisruptionReason::Drifted,
    ];
    let reasons = all.iter().copied().filter(|_| rng.below(3) == 0).collect();
    Budget {
        nodes,
        schedule,
        duration,
        reasons,
    }
}

fn random_pod(rng: &mut SplitMix64, name: String) -> NodePod {
    let mut p = bound_pod(&name, [100, 250, 500, 1000, 2000][rng.below(5)]);
    let app = APPS[rng.below(4)];
    p.pod.labels = labels(&[("app", app)]);
    p.pod.priority = [0, 0, 1000, -100][rng.below(4)];
    if rng.below(4) == 0 {
        p.deletion_cost = Some(["100", "-5", "oops"][rng.below(3)].to_string());
    }
    match rng.below(12) {
        0 => p.do_not_disrupt = Some("true".into()),
        1 => p.do_not_disrupt = Some("2h".into()),
        2 => p.daemon_set = true,
        3 => p.mirror = true,
        4 => p.terminating = true,
        5 => {
            p.terminating = true;
            p.stateful_set = true;
        }
        _ => {}
    }
    match app {
        "b" => {
            p.pod.affinity.pod_anti_affinity = Some(PodAffinity {
                required: vec![term(HOSTNAME, &[("app", "b")])],
                preferred: Vec::new(),
            })
        }
        "c" if rng.below(2) == 0 => {
            p.pod.node_selector = labels(&[(ZONE, ZONES[rng.below(3)])]);
        }
        _ => {}
    }
    p
}

fn random_cluster(seed: u64) -> DisruptionSnapshot {
    let mut rng = SplitMix64::new(seed);
    let mut pools = Vec::new();
    for i in 0..1 + rng.below(2) {
        let types: Vec<InstanceType> = d_series()
            .into_iter()
            .filter(|_| rng.below(4) > 0)
            .collect();
        let mut p = dpool(&format!("pool-{i}"), types);
        p.consolidation_policy = [
            ConsolidationPolicy::WhenEmptyOrUnderutilized,
            ConsolidationPolicy::WhenEmptyOrUnderutilized,
            ConsolidationPolicy::Balanced,
            ConsolidationPolicy::WhenEmpty,
        ][rng.below(4)];
        p.consolidate_after = ["0s", "0s", "30s", "Never"][rng.below(4)].to_string();
        p.budgets = (0..rng.below(3)).map(|_| random_budget(&mut rng)).collect();
        if rng.below(4) == 0 {
            p.pool.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["on-demand"])];
        }
        if rng.below(8) == 0 {
            p.expire_after = "Never".into();
        }
        pools.push(p);
    }
    let sizes = d_series();
    let mut nodes = Vec::new();
    for i in 0..rng.below(9) {
        let pool = format!("pool-{}", rng.below(pools.len()));
        let ty = &sizes[rng.below(sizes.len())].name;
        let ct = ["on-demand", "spot"][rng.below(2)];
        let mut n = managed(&format!("node-{i}"), &pool, ty, ZONES[rng.below(3)], ct);
        match rng.below(16) {
            0 => n.node_pool = None,
            1 => n.in_flight = true,
            2 => n.initialized = false,
            3 => n.deleting = true,
            4 => n.nominated = true,
            5 => n.not_ready = true,
            6 => n.do_not_disrupt = Some("true".into()),
            7 => n.created = NOW - 31 * DAY,
            8 => n.node_pool_hash_drifted = true,
            9 => n.provider_drift = Some("ImageDrifted".into()),
            _ => {}
        }
        if rng.below(3) == 0 {
            n.last_pod_event = Some(NOW - [5, 60, 3600][rng.below(3)]);
        }
        n.pods = (0..rng.below(5))
            .map(|j| random_pod(&mut rng, format!("p-{i}-{j}")))
            .collect();
        nodes.push(n);
    }
    let pdbs = (0..rng.below(3))
        .map(|i| PodDisruptionBudget {
            namespace: "default".into(),
            name: format!("pdb-{i}"),
            selector: selector(&[("app", APPS[rng.below(2)])]),
            disruptions_allowed: rng.below(2) as i32,
            always_allow_unhealthy: false,
        })
        .collect();
    let pending = (0..rng.below(2))
        .map(|i| pod(&format!("pending-{i}"), 500, GI))
        .collect();
    let mut s = dsnapshot(pools, nodes);
    s.pdbs = pdbs;
    s.pending_pods = pending;
    let mut statics = SplitMix64::new(seed ^ 0x2545_f491_4f6c_dd1d);
    if statics.below(4) == 0 {
        let p = &mut s.node_pools[0];
        p.pool.replicas = Some(statics.below(5) as u32);
        if statics.below(2) == 0 {
            p.pool.limits = res(&[("nodes", 1 + statics.below(5) as i64)]);
        }
    }
    let mut buffering = SplitMix64::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    if buffering.below(3) == 0 {
        let cpu = [250, 500, 1000][buffering.below(3)];
        let app = APPS[buffering.below(2)];
        s.pending_pods
            .extend(buffer_pods("spare", 1 + buffering.below(4), cpu, app));
    }
    s.options.spot_to_spot_consolidation = rng.below(2) == 0;
    s
}

fn shuffle<T>(v: &mut [T], rng: &mut SplitMix64) {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
}

fn shuffled(s: &DisruptionSnapshot, seed: u64) -> DisruptionSnapshot {
    let mut rng = SplitMix64::new(seed);
    let mut s = s.clone();
    shuffle(&mut s.nodes, &mut rng);
    shuffle(&mut s.node_pools, &mut rng);
    shuffle(&mut s.pdbs, &mut rng);
    shuffle(&mut s.pending_pods, &mut rng);
    for p in &mut s.node_pools {
        shuffle(&mut p.budgets, &mut rng);
        let types = std::sync::Arc::make_mut(&mut p.pool.instance_types);
        shuffle(types, &mut rng);
        for t in types {
            shuffle(&mut t.offerings, &mut rng);
        }
    }
    for n in &mut s.nodes {
        shuffle(&mut n.pods, &mut rng);
    }
    s
}

fn expired(s: &DisruptionSnapshot, n: &ClusterNode) -> bool {
    let Some(pool) = s
        .node_pools
        .iter()
        .find(|p| Some(&p.pool.name) == n.node_pool.as_ref())
    else {
        return false;
    };
    pool.expire_after == "720h" && !n.deleting && n.created + 720 * 3600 <= s.now
}

/// The budget for `reason` in `pool` as the documentation states it.
fn allowed(s: &DisruptionSnapshot, pool: &DisruptionNodePool, reason: DisruptionReason) -> i64 {
    let mine = s
        .nodes
        .iter()
        .filter(|n| n.node_pool.as_ref() == Some(&pool.pool.name) && n.initialized && !n.in_flight);
    let total = mine.clone().count() as i64;
    let disrupting = mine
        .filter(|n| n.not_ready || n.deleting || expired(s, n))
        .count() as i64;
    let mut min = i64::MAX;
    for b in &pool.budgets {
        let active = match b.schedule.as_deref() {
            None => true,
            Some(sch) => sch == OPEN.0,
        };
        let applies = b.reasons.is_empty() || b.reasons.contains(&reason);
        if active && applies {
            let value = match b.nodes.strip_suffix('%') {
                Some(pct) => (pct.parse::<i64>().unwrap() * total + 99) / 100,
                None => b.nodes.parse().unwrap(),
            };
            min = min.min(value);
        }
    }
    if min == i64::MAX {
        return i64::MAX;
    }
    (min - disrupting).max(0)
}

fn selects(pdb: &PodDisruptionBudget, p: &NodePod) -> bool {
    let want = pdb.selector.as_ref().unwrap().match_labels.get("app");
    p.pod.namespace == pdb.namespace && p.pod.labels.get("app") == want
}

/// Why a node may not be in any command, if it may not.
fn protected(s: &DisruptionSnapshot, n: &ClusterNode) -> Option<String> {
    if n.node_pool.is_none() || n.in_flight || !n.initialized || n.deleting || n.nominated {
        return Some("not a candidate".into());
    }
    if expired(s, n) {
        return Some("expired".into());
    }
    if n.do_not_disrupt.is_some() {
        return Some("node do-not-disrupt".into());
    }
    // A pod being deleted is already going: it protects nothing.
    for p in n.pods.iter().filter(|p| !p.terminating) {
        let active = match p.do_not_disrupt.as_deref() {
            Some("true") => true,
            Some(d) => {
                assert_eq!(d, "2h");
                p.start_time.is_none_or(|t| s.now - t < 7200)
            }
            None => false,
        };
        if active {
            return Some(format!("pod {} do-not-disrupt", p.pod.name));
        }
        if p.mirror || p.do_not_disrupt.as_deref() == Some("true") {
            continue;
        }
        let matching: Vec<&PodDisruptionBudget> = s.pdbs.iter().filter(|b| selects(b, p)).collect();
        if matching.len() > 1 || matching.iter().any(|b| b.disruptions_allowed == 0) {
            return Some(format!("pod {} under a PDB", p.pod.name));
        }
    }
    None
}

fn node_price(s: &DisruptionSnapshot, n: &ClusterNode) -> f64 {
    let pool = s
        .node_pools
        .iter()
        .find(|p| Some(&p.pool.name) == n.node_pool.as_ref())
        .unwrap();
    let ty = &n.labels[INSTANCE_TYPE];
    pool.pool
        .instance_types
        .iter()
        .find(|t| &t.name == ty)
        .unwrap()
        .offerings
        .iter()
        .filter(|o| {
            o.capacity_type == n.labels[CAPACITY_TYPE] && o.zone.as_ref() == Some(&n.labels[ZONE])
        })
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min)
}

fn check(s: &DisruptionSnapshot, plan: &DisruptionPlan) -> Result<(), String> {
    let by_name: BTreeMap<&str, &ClusterNode> =
        s.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    // Expiration is its own list, exactly the expired nodes.
    let want_expired: Vec<&str> = by_name
        .values()
        .filter(|n| expired(s, n))
        .map(|n| n.name.as_str())
        .collect();
    if plan.expired != want_expired {
        return Err(format!("expired {:?}, want {want_expired:?}", plan.expired));
    }
    let Some(cmd) = &plan.command else {
        return Ok(());
    };
    let nodes: Vec<&ClusterNode> = cmd.candidates.iter().map(|c| by_name[c.as_str()]).collect();
    // Budgets.
    for pool in &s.node_pools {
        let taken = nodes
            .iter()
            .filter(|n| n.node_pool.as_ref() == Some(&pool.pool.name))
            .count() as i64;
        let budget = allowed(s, pool, cmd.reason);
        if taken > budget {
            return Err(format!(
                "{taken} nodes of {} for {:?}, budget {budget}",
                pool.pool.name, cmd.reason
            ));
        }
    }
    // Protection.
    for n in &nodes {
        if let Some(why) = protected(s, n) {
            return Err(format!("{} is in the command: {why}", n.name));
        }
    }
    // A static NodePool's drifted node: replaced by one NodeClaim from its
    // template, while the NodePool is within its replicas and node limit;
    // its pods go wherever they fit, as on a scale-down.
    let static_pool = nodes.first().and_then(|n| {
        s.node_pools
            .iter()
            .find(|p| Some(&p.pool.name) == n.node_pool.as_ref() && p.pool.replicas.is_some())
    });
    if let Some(pool) = static_pool {
        let of_pool = || {
            s.nodes
                .iter()
                .filter(|n| n.node_pool.as_ref() == Some(&pool.pool.name))
        };
        let running = of_pool().filter(|n| !n.deleting).count() as i64;
        // Nodes still going count against the node limit.
        let existing = of_pool().count() as i64;
        let r = &cmd.replacements;
        let limit = pool.pool.limits.get("nodes").copied().unwrap_or(i64::MAX);
        let ok = cmd.reason == DisruptionReason::Drifted
            && nodes.len() == 1
            && r.new_node_claims.len() == 1
            && r.new_node_claims[0].node_pool == pool.pool.name
            && r.new_node_claims[0].pods.is_empty()
            && running <= i64::from(pool.pool.replicas.unwrap_or(0))
            && existing < limit;
        return if ok {
            Ok(())
        } else {
            Err(format!("static NodePool command: {cmd:#?}"))
        };
    }
    // Every evicted pod has a place that stays.
    let r = &cmd.replacements;
    for n in &nodes {
        let moves = |p: &&NodePod| !p.daemon_set && !p.mirror && (!p.terminating || p.stateful_set);
        for p in n.pods.iter().filter(moves) {
            let placed = r.placements.iter().find(|pl| pl.pod.name == p.pod.name);
            let Some(placed) = placed else {
                return Err(format!("pod {} of {} has no place", p.pod.name, n.name));
            };
            match &placed.target {
                Target::ExistingNode(t) => {
                    let target = by_name[t.as_str()];
                    if cmd.candidates.contains(t)
                        || target.deleting
                        || expired(s, target)
                        || !target.initialized
                        || target.in_flight
                    {
                        return Err(format!(
                            "pod {} goes to {t}, which is going too",
                            p.pod.name
                        ));
                    }
                }
                Target::NewNodeClaim(i) if *i < r.new_node_claims.len() => {}
                Target::NewNodeClaim(i) => return Err(format!("no NodeClaim {i}")),
            }
        }
    }
    // Consolidation only ever saves.
    if cmd.reason == DisruptionReason::Underutilized {
        let price: f64 = nodes.iter().map(|n| node_price(s, n)).sum();
        if (price - cmd.candidates_price).abs() > 1e-9 {
            return Err(format!(
                "candidates cost {price}, command says {}",
                cmd.candidates_price
            ));
        }
        if r.new_node_claims.len() > 1 {
            return Err("consolidation made several NodeClaims".into());
        }
        if let Some(claim) = r.new_node_claims.first() {
            let pool = s
                .node_pools
                .iter()
                .find(|p| p.pool.name == claim.node_pool)
                .unwrap();
            let zones = values(claim, ZONE);
            let cts = values(claim, CAPACITY_TYPE);
            for name in types(r, claim) {
                let t = pool
                    .pool
                    .instance_types
                    .iter()
                    .find(|t| t.name == name)
                    .unwrap();
                let cheapest = t
                    .offerings
                    .iter()
                    .filter(|o| o.available)
                    .filter(|o| zones.is_empty() || zones.contains(&o.zone.as_deref().unwrap()))
                    .filter(|o| cts.is_empty() || cts.contains(&o.capacity_type.as_str()))
                    .map(|o| o.price)
                    .fold(f64::INFINITY, f64::min);
                if cheapest >= price {
                    return Err(format!(
                        "replacement type {name} at {cheapest} is not cheaper than {price}"
                    ));
                }
            }
            if cmd.replacements_price >= price || cmd.savings <= 0.0 {
                return Err(format!("no savings: {cmd:#?}"));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn decisions_keep_every_promise(seed in any::<u64>()) {
        let s = random_cluster(seed);
        let plan = disrupt(&s);
        if let Err(e) = check(&s, &plan) {
            prop_assert!(false, "{e}\nplan: {plan:#?}");
        }
    }

    #[test]
    fn a_command_holds_on_the_snapshot_it_was_decided_on(seed in any::<u64>()) {
        let s = random_cluster(seed);
        if let Some(cmd) = disrupt(&s).command.filter(|c| c.method != Method::Drift) {
            prop_assert_eq!(validate(&s, &cmd), Ok(cmd));
        }
    }

    #[test]
    fn input_order_does_not_change_the_decision(seed in any::<u64>(), order in any::<u64>()) {
        let s = random_cluster(seed);
        let a = serde_json::to_string(&disrupt(&s)).unwrap();
        let b = serde_json::to_string(&disrupt(&shuffled(&s, order))).unwrap();
        prop_assert_eq!(a, b);
    }
}

#[test]
fn random_clusters_exercise_every_method() {
    // Guards the generator: properties over empty decisions would prove nothing.
    let mut seen: BTreeMap<Method, usize> = BTreeMap::new();
    let mut replaced = 0;
    let (mut static_drift, mut buffered) = (0, 0);
    for seed in 0..400 {
        let s = random_cluster(seed);
        buffered += usize::from(s.pending_pods.iter().any(|p| p.buffer.is_some()));
        if let Some(c) = disrupt(&s).command {
            *seen.entry(c.method).or_default() += 1;
            replaced += usize::from(c.is_replace());
            let first = s.nodes.iter().find(|n| n.name == c.candidates[0]);
            let pool = first.and_then(|n| n.node_pool.as_ref());
            static_drift += usize::from(
                s.node_pools
                    .iter()
                    .any(|p| Some(&p.pool.name) == pool && p.pool.replicas.is_some()),
            );
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(replaced > 10, "{replaced} replacements in {seen:?}");
    assert!(static_drift > 0, "no static NodePool's node replaced");
    assert!(buffered > 50, "{buffered} clusters with a CapacityBuffer");
}
