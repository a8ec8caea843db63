//! One scenario per disruption rule, each with the decision Karpenter makes.
#![allow(clippy::unwrap_used)]

mod common;

use common::disruption::*;
use common::*;
use engine::disruption::*;
use engine::*;
use vocabulary::labels::{CAPACITY_TYPE, HOSTNAME, ZONE};

fn on_demand_only(mut p: DisruptionNodePool) -> DisruptionNodePool {
    p.pool.requirements = vec![req(CAPACITY_TYPE, Operator::In, &["on-demand"])];
    p
}

fn d(name: &str, ty: &str) -> ClusterNode {
    managed(name, "default", ty, "zone-1", "on-demand")
}

// ---- Emptiness ----

#[test]
fn an_empty_node_is_deleted_by_emptiness() {
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![
            filled(d("busy", "Standard_D4s_v5"), 2, 1000),
            d("idle", "Standard_D4s_v5"),
        ],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(cmd.reason, DisruptionReason::Empty);
    assert_eq!(cmd.candidates, ["idle"]);
    assert!(!cmd.is_replace());
    assert!((cmd.savings - 0.192).abs() < 1e-9, "{cmd:#?}");
    assert_eq!(
        reasons(&plan, "busy"),
        ["Another command came first this round: Emptiness"]
    );
}

#[test]
fn daemonset_and_mirror_pods_do_not_make_a_node_busy() {
    let mut ds = bound_pod("ds", 100);
    ds.daemon_set = true;
    let mut mirror = bound_pod("static", 100);
    mirror.mirror = true;
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![with_pods(d("n", "Standard_D4s_v5"), vec![ds, mirror])],
    ));
    assert_eq!(command(&plan).candidates, ["n"]);
    assert_eq!(command(&plan).method, Method::Emptiness);
}

#[test]
fn pods_being_deleted_neither_keep_nor_protect_their_node() {
    let mut leaving = bound_pod("leaving", 1000);
    leaving.terminating = true;
    leaving.do_not_disrupt = Some("true".into());
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![
            filled(d("busy", "Standard_D4s_v5"), 2, 1000),
            with_pods(d("scaled-down", "Standard_D4s_v5"), vec![leaving]),
        ],
    ));
    assert_eq!(command(&plan).method, Method::Emptiness, "{plan:#?}");
    assert_eq!(command(&plan).candidates, ["scaled-down"]);
}

#[test]
fn a_statefulset_pod_being_deleted_still_needs_its_place() {
    // Its replica comes back once it is gone, and must fit somewhere.
    let mut replica = bound_pod("db-0", 500);
    replica.terminating = true;
    replica.stateful_set = true;
    replica.pod.node_selector = labels(&[("disk", "local-nvme")]);
    let mut home = with_pods(d("home", "Standard_D16s_v5"), vec![replica]);
    home.labels.insert("disk".into(), "local-nvme".into());
    let plan = disrupt(&dsnapshot(vec![dpool("default", d_series())], vec![home]));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(
        reasons(&plan, "home")[0].starts_with("Not all pods would schedule, default/db-0"),
        "{plan:#?}"
    );
}

#[test]
fn consolidate_after_counts_from_the_last_pod_event() {
    let mut idle = d("idle", "Standard_D4s_v5");
    idle.last_pod_event = Some(NOW - 10);
    let mut p = dpool("default", d_series());
    p.consolidate_after = "30s".into();
    let plan = disrupt(&dsnapshot(vec![p.clone()], vec![idle.clone()]));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(kinds(&plan, "idle"), [KeepKind::Waiting]);
    assert!(
        reasons(&plan, "idle")[0].contains("consolidateAfter (30s)"),
        "{plan:#?}"
    );
    p.consolidate_after = "5s".into();
    assert_eq!(
        command(&disrupt(&dsnapshot(vec![p], vec![idle]))).candidates,
        ["idle"]
    );
}

#[test]
fn consolidate_after_never_turns_consolidation_off() {
    // Nothing can be simulated away here, so nothing is prepared; each node
    // still says why it stays.
    let mut p = dpool("default", d_series());
    p.consolidate_after = "Never".into();
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![
            d("idle", "Standard_D4s_v5"),
            filled(d("busy", "Standard_D16s_v5"), 1, 500),
        ],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    for n in ["idle", "busy"] {
        assert_eq!(
            reasons(&plan, n),
            ["NodePool \"default\" has consolidation disabled"]
        );
        // The pool's setting: `explain` says it, no event repeats it per node.
        assert_eq!(kinds(&plan, n), [KeepKind::Waiting], "{n}");
    }
}

#[test]
fn when_empty_pools_only_remove_empty_nodes() {
    let mut p = dpool("default", d_series());
    p.consolidation_policy = ConsolidationPolicy::WhenEmpty;
    let busy = filled(d("busy", "Standard_D16s_v5"), 1, 500);
    let plan = disrupt(&dsnapshot(vec![p.clone()], vec![busy.clone()]));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "busy"),
        ["NodePool \"default\" has non-empty consolidation disabled"]
    );
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![busy, d("idle", "Standard_D2s_v5")],
    ));
    assert_eq!(command(&plan).candidates, ["idle"]);
}

// ---- Candidates ----

#[test]
fn nodes_that_cannot_be_disrupted_say_why() {
    let size = "Standard_D4s_v5";
    let mut in_flight = d("in-flight", size);
    in_flight.in_flight = true;
    let mut uninitialized = d("uninitialized", size);
    uninitialized.initialized = false;
    let mut deleting = d("deleting", size);
    deleting.deleting = true;
    let mut nominated = d("nominated", size);
    nominated.nominated = true;
    let mut annotated = d("annotated", size);
    annotated.do_not_disrupt = Some("true".into());
    let mut protected_pod = bound_pod("precious", 500);
    protected_pod.do_not_disrupt = Some("true".into());
    let pod_annotated = with_pods(d("pod-annotated", size), vec![protected_pod]);
    let mut orphan = d("orphan", size);
    orphan.node_pool = Some("gone".into());
    let unmanaged = ClusterNode {
        name: "unmanaged".into(),
        ..d("unmanaged", size)
    };
    let mut unmanaged = unmanaged;
    unmanaged.node_pool = None;
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![
            in_flight,
            uninitialized,
            deleting,
            nominated,
            annotated,
            pod_annotated,
            orphan,
            unmanaged,
        ],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    let expect = [
        ("in-flight", "Nodeclaim does not have an associated node"),
        ("uninitialized", "Node isn't initialized"),
        ("deleting", "Node is deleting or marked for deletion"),
        ("nominated", "Node is nominated for a pending pod"),
        (
            "annotated",
            "Disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation",
        ),
        (
            "pod-annotated",
            "Pod \"default/precious\" has \"karpenter.sh/do-not-disrupt\" annotation",
        ),
        ("orphan", "Owning nodepool \"gone\" not found"),
    ];
    for (node, why) in expect {
        assert_eq!(reasons(&plan, node), [why], "{node}");
        // A node on its way up, or about to take a pod, is not blocked,
        // only not a candidate yet.
        let kind = match node {
            "in-flight" | "uninitialized" | "nominated" => KeepKind::Waiting,
            _ => KeepKind::DisruptionBlocked,
        };
        assert_eq!(kinds(&plan, node), [kind], "{node}");
    }
    assert!(plan.kept.iter().all(|k| k.name != "unmanaged"));
}

#[test]
fn do_not_disrupt_durations_expire() {
    let mut young = bound_pod("young", 500);
    young.do_not_disrupt = Some("2h".into());
    young.start_time = Some(NOW - 3600);
    let mut old = bound_pod("old", 500);
    old.do_not_disrupt = Some("30m".into());
    old.start_time = Some(NOW - 3600);
    let mut unstarted = bound_pod("unstarted", 500);
    unstarted.do_not_disrupt = Some("30m".into());
    unstarted.start_time = None;
    let mut garbled = bound_pod("garbled", 500);
    garbled.do_not_disrupt = Some("soon".into());
    let pool = on_demand_only(dpool("default", d_series()));
    let plan = disrupt(&dsnapshot(
        vec![pool.clone()],
        vec![
            with_pods(d("a", "Standard_D8s_v5"), vec![young]),
            with_pods(d("b", "Standard_D8s_v5"), vec![unstarted]),
        ],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "a"),
        ["Pod \"default/young\" has \"karpenter.sh/do-not-disrupt\" annotation"]
    );
    assert_eq!(
        reasons(&plan, "b"),
        ["Pod \"default/unstarted\" has \"karpenter.sh/do-not-disrupt\" annotation"]
    );
    // Elapsed or unreadable: no protection.
    let plan = disrupt(&dsnapshot(
        vec![pool],
        vec![
            with_pods(d("a", "Standard_D8s_v5"), vec![old]),
            with_pods(d("b", "Standard_D8s_v5"), vec![garbled]),
        ],
    ));
    assert!(plan.command.is_some(), "{plan:#?}");
}

fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        namespace: "default".into(),
        name: name.into(),
        selector: selector(&[("app", app)]),
        disruptions_allowed: allowed,
        always_allow_unhealthy: false,
    }
}

fn app_pod(name: &str, app: &str) -> NodePod {
    let mut p = bound_pod(name, 500);
    p.pod.labels = labels(&[("app", app)]);
    p
}

#[test]
fn pdbs_with_no_disruption_left_block_their_nodes() {
    let pool = on_demand_only(dpool("default", d_series()));
    let nodes = vec![
        with_pods(d("a", "Standard_D8s_v5"), vec![app_pod("web-1", "web")]),
        with_pods(d("b", "Standard_D8s_v5"), vec![app_pod("db-1", "db")]),
    ];
    let mut s = dsnapshot(vec![pool], nodes);
    s.pdbs = vec![pdb("web", "web", 0), pdb("db", "db", 1)];
    let plan = disrupt(&s);
    assert_eq!(
        reasons(&plan, "a"),
        ["PDB default/web prevents pod evictions"]
    );
    assert_eq!(command(&plan).candidates, ["b"]);

    // Unhealthy pods do not count when the PDB says so.
    s.pdbs[0].always_allow_unhealthy = true;
    s.nodes[0].pods[0].not_ready = true;
    assert!(
        disrupt(&s)
            .kept
            .iter()
            .all(|k| k.name != "a" || k.reasons[0].kind != KeepKind::DisruptionBlocked)
    );

    // Two PDBs on one pod: the Eviction API refuses.
    s.pdbs = vec![pdb("web", "web", 1), pdb("web-too", "web", 1)];
    let plan = disrupt(&s);
    assert_eq!(
        reasons(&plan, "a"),
        ["Eviction does not support multiple PDBs: default/web, default/web-too"]
    );
}

// ---- Budgets ----

#[test]
fn budgets_cap_each_command_and_percentages_round_up() {
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "30%".into(),
        ..Budget::default()
    }];
    let nodes: Vec<ClusterNode> = (0..4)
        .map(|i| d(&format!("idle-{i}"), "Standard_D4s_v5"))
        .collect();
    // 30% of 4 rounds up to 2.
    let plan = disrupt(&dsnapshot(vec![p.clone()], nodes.clone()));
    assert_eq!(command(&plan).candidates.len(), 2, "{plan:#?}");
    let left: Vec<&KeptNode> = plan.kept.iter().collect();
    assert_eq!(left.len(), 2);
    for k in left {
        assert_eq!(
            k.reasons[0].message,
            "No allowed disruptions for disruption reason Empty due to blocking budget"
        );
    }
    // A NotReady node uses one of them up.
    let mut nodes = nodes;
    nodes[3].not_ready = true;
    let plan = disrupt(&dsnapshot(vec![p], nodes));
    assert_eq!(command(&plan).candidates.len(), 1, "{plan:#?}");
    let empty = plan
        .budgets
        .iter()
        .find(|b| b.reason == DisruptionReason::Empty)
        .unwrap();
    assert_eq!(empty.allowed, 1);
}

#[test]
fn a_zero_budget_during_its_schedule_blocks_and_says_so() {
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "0".into(),
        schedule: Some("0 9 * * mon-fri".into()),
        duration: Some("8h".into()),
        reasons: Vec::new(),
    }];
    let mut s = dsnapshot(vec![p], vec![d("idle", "Standard_D4s_v5")]);
    let plan = disrupt(&s);
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "idle"),
        ["No allowed disruptions for disruption reason Empty due to blocking budget"]
    );
    assert!(plan.budgets.iter().all(|b| b.allowed == 0));
    // At 18:00 the window has closed.
    s.now = NOW + 6 * 3600;
    assert!(disrupt(&s).command.is_some());
}

#[test]
fn budgets_apply_per_reason() {
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "0".into(),
        reasons: vec![DisruptionReason::Empty, DisruptionReason::Underutilized],
        ..Budget::default()
    }];
    let mut drifted = filled(d("drifted", "Standard_D4s_v5"), 1, 1000);
    drifted.node_pool_hash_drifted = true;
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![d("idle", "Standard_D4s_v5"), drifted],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates, ["drifted"]);
}

#[test]
fn a_budget_that_cannot_be_read_blocks_the_pool() {
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "lots".into(),
        ..Budget::default()
    }];
    let plan = disrupt(&dsnapshot(vec![p], vec![d("idle", "Standard_D4s_v5")]));
    assert!(plan.command.is_none());
    assert!(plan.budgets.iter().all(|b| b.allowed == 0));
}

// ---- Consolidation ----

#[test]
fn single_node_replaces_an_oversized_node_with_a_cheaper_spot_node() {
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![filled(d("big", "Standard_D16s_v5"), 2, 1000)],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::SingleNodeConsolidation);
    assert_eq!(cmd.reason, DisruptionReason::Underutilized);
    assert_eq!(cmd.candidates, ["big"]);
    let r = &cmd.replacements;
    assert_eq!(r.new_node_claims.len(), 1);
    let claim = &r.new_node_claims[0];
    // Both capacity types allowed: forced to spot, priced as spot.
    assert_eq!(capacity_types(claim), ["spot"]);
    let big = d_price("Standard_D16s_v5", "on-demand");
    for t in types(r, claim) {
        assert!(d_price(t, "spot") < big, "{t} is not cheaper");
    }
    assert_eq!(
        types(r, claim),
        ["Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5"]
    );
    assert!((cmd.replacements_price - d_price("Standard_D4s_v5", "spot")).abs() < 1e-9);
    assert!((cmd.savings - (big - cmd.replacements_price)).abs() < 1e-9);
    // Every evicted pod has its place.
    assert_eq!(r.placements.len(), 2);
    assert!(r.unschedulable.is_empty());
}

#[test]
fn a_pending_pod_that_fits_nowhere_does_not_stop_consolidation() {
    let mut s = dsnapshot(
        vec![dpool("default", d_series())],
        vec![filled(d("big", "Standard_D16s_v5"), 2, 1000)],
    );
    s.pending_pods = vec![pod("huge", 100_000, GI)];
    let plan = disrupt(&s);
    let cmd = command(&plan);
    assert_eq!(cmd.candidates, ["big"]);
    assert_eq!(cmd.replacements.new_node_claims.len(), 1);
    // Simulated like Karpenter, with the pending pod, which stays pending.
    assert_eq!(cmd.replacements.unschedulable.len(), 1);
}

#[test]
fn a_node_with_no_cheaper_replacement_is_kept() {
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![filled(d("small", "Standard_D2s_v5"), 1, 1500)],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "small"),
        ["Can't replace with a cheaper node"]
    );
    assert_eq!(kinds(&plan, "small"), [KeepKind::Unconsolidatable]);
}

#[test]
fn pods_with_nowhere_to_go_keep_their_node() {
    let mut pinned = bound_pod("pinned", 500);
    pinned.pod.node_selector = labels(&[("disk", "local-nvme")]);
    let mut home = with_pods(d("home", "Standard_D16s_v5"), vec![pinned]);
    home.labels.insert("disk".into(), "local-nvme".into());
    let plan = disrupt(&dsnapshot(vec![dpool("default", d_series())], vec![home]));
    assert!(plan.command.is_none(), "{plan:#?}");
    let why = reasons(&plan, "home");
    assert!(
        why[0].starts_with(
            "Not all pods would schedule, default/pinned => incompatible with nodepool"
        ),
        "{why:?}"
    );
}

#[test]
fn evicted_pods_may_not_count_on_an_uninitialized_node() {
    let mut fresh = d("fresh", "Standard_D8s_v5");
    fresh.initialized = false;
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![filled(d("a", "Standard_D8s_v5"), 1, 1000), fresh],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "a"),
        [
            "Not all pods would schedule, default/a-0 => would schedule against uninitialized node/fresh"
        ]
    );
}

#[test]
fn a_drifted_node_does_not_wait_for_an_uninitialized_one() {
    // The replacement of an earlier command, still coming up: consolidation
    // waits for it (above), drift replaces the node without it.
    let mut fresh = d("fresh", "Standard_D8s_v5");
    fresh.initialized = false;
    let mut drifted = filled(d("a", "Standard_D8s_v5"), 1, 1000);
    drifted.node_pool_hash_drifted = true;
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![drifted, fresh],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates, ["a"]);
    assert!(cmd.is_replace(), "{cmd:#?}");
    assert!(
        cmd.replacements
            .placements
            .iter()
            .all(|p| matches!(p.target, Target::NewNodeClaim(_))),
        "{cmd:#?}"
    );
}

#[test]
fn consolidation_that_needs_two_new_nodes_is_refused() {
    let anti = PodAffinity {
        required: vec![term(HOSTNAME, &[("app", "solo")])],
        preferred: Vec::new(),
    };
    let mut pods = Vec::new();
    for i in 0..2 {
        let mut p = app_pod(&format!("solo-{i}"), "solo");
        p.pod.affinity.pod_anti_affinity = Some(anti.clone());
        pods.push(p);
    }
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![with_pods(d("pair", "Standard_D16s_v5"), pods)],
    ));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "pair"),
        ["Can't remove without creating 2 candidates"]
    );
}

#[test]
fn multi_node_deletes_what_the_rest_can_absorb() {
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![
            filled(d("a", "Standard_D4s_v5"), 1, 1000),
            filled(d("b", "Standard_D4s_v5"), 1, 1000),
            filled(d("c", "Standard_D4s_v5"), 1, 1000),
        ],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert_eq!(cmd.candidates, ["a", "b"]);
    assert!(!cmd.is_replace());
    for p in &cmd.replacements.placements {
        assert_eq!(p.target, Target::ExistingNode("c".into()));
    }
    assert!((cmd.savings - 2.0 * 0.192).abs() < 1e-9);
}

#[test]
fn multi_node_merges_two_half_empty_nodes_into_one_cheaper_node() {
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![
            filled(d("a", "Standard_D8s_v5"), 1, 1000),
            filled(d("b", "Standard_D8s_v5"), 1, 1000),
        ],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert_eq!(cmd.candidates, ["a", "b"]);
    let r = &cmd.replacements;
    // D8 is what is being removed: only types cheaper than it are kept.
    assert_eq!(types(r, &r.new_node_claims[0]), ["Standard_D4s_v5"]);
    assert_eq!(r.new_node_claims[0].pods.len(), 2);
}

#[test]
fn spot_nodes_are_not_replaced_by_spot_without_the_feature_gate() {
    let spot = filled(
        managed("s", "default", "Standard_D16s_v5", "zone-1", "spot"),
        1,
        1000,
    );
    let mut s = dsnapshot(vec![dpool("default", d_series())], vec![spot]);
    let plan = disrupt(&s);
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "s"),
        ["SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"]
    );
    s.options.spot_to_spot_consolidation = true;
    let plan = disrupt(&s);
    assert_eq!(
        reasons(&plan, "s"),
        [
            "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to consolidate, got 3"
        ]
    );
}

#[test]
fn spot_to_spot_launches_from_the_fifteen_cheapest() {
    let mut catalogue: Vec<InstanceType> = (0..20)
        .map(|i| it(&format!("small-{i:02}"), 4, 16, 0.1 + 0.01 * i as f64))
        .collect();
    catalogue.push(it("large", 16, 64, 1.0));
    let spot = filled(managed("s", "default", "large", "zone-1", "spot"), 1, 1000);
    let mut s = dsnapshot(vec![dpool("default", catalogue)], vec![spot]);
    s.options.spot_to_spot_consolidation = true;
    let plan = disrupt(&s);
    let cmd = command(&plan);
    let r = &cmd.replacements;
    let names = types(r, &r.new_node_claims[0]);
    assert_eq!(names.len(), 15, "{names:?}");
    assert_eq!(names[0], "small-00");
    assert_eq!(capacity_types(&r.new_node_claims[0]), ["spot"]);
}

#[test]
fn spot_nodes_may_still_be_deleted() {
    let spot = filled(
        managed("s", "default", "Standard_D4s_v5", "zone-1", "spot"),
        1,
        1000,
    );
    let mut keeper = bound_pod("keeper", 1000);
    keeper.do_not_disrupt = Some("true".into());
    let roomy = with_pods(d("roomy", "Standard_D8s_v5"), vec![keeper]);
    let plan = disrupt(&dsnapshot(
        vec![dpool("default", d_series())],
        vec![spot, roomy],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.candidates, ["s"]);
    assert!(!cmd.is_replace());
}

#[test]
fn single_node_tries_the_cheapest_disruption_per_dollar_first() {
    let mut p = on_demand_only(dpool("default", d_series()));
    p.budgets = vec![Budget {
        nodes: "1".into(),
        ..Budget::default()
    }];
    let mut important = bound_pod("important", 1000);
    important.pod.priority = 1_000_000_000;
    let nodes = vec![
        with_pods(d("a", "Standard_D8s_v5"), vec![important.clone()]),
        filled(d("b", "Standard_D8s_v5"), 1, 1000),
    ];
    let plan = disrupt(&dsnapshot(vec![p.clone()], nodes));
    assert_eq!(command(&plan).method, Method::SingleNodeConsolidation);
    assert_eq!(command(&plan).candidates, ["b"]);
    // The same with names swapped: the order is by cost, not by name.
    let nodes = vec![
        filled(d("a", "Standard_D8s_v5"), 1, 1000),
        with_pods(d("b", "Standard_D8s_v5"), vec![important]),
    ];
    assert_eq!(
        command(&disrupt(&dsnapshot(vec![p], nodes))).candidates,
        ["a"]
    );
}

#[test]
fn emptiness_under_a_budget_removes_the_priciest_first() {
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "1".into(),
        ..Budget::default()
    }];
    let mut ds = bound_pod("ds", 100);
    ds.daemon_set = true;
    let nodes = ["Standard_D2s_v5", "Standard_D8s_v5", "Standard_D4s_v5"]
        .iter()
        .enumerate()
        .map(|(i, t)| with_pods(d(&format!("n{i}"), t), vec![ds.clone()]))
        .collect();
    let plan = disrupt(&dsnapshot(vec![p], nodes));
    assert_eq!(command(&plan).candidates, ["n1"]);
}

#[test]
fn balanced_pools_refuse_moves_that_save_too_little() {
    let pods = |prefix: &str| -> Vec<NodePod> {
        (0..10)
            .map(|i| bound_pod(&format!("{prefix}-{i}"), 300))
            .collect()
    };
    let nodes = vec![
        with_pods(d("a", "Standard_D4s_v5"), pods("a")),
        with_pods(d("b", "Standard_D4s_v5"), pods("b")),
    ];
    let mut p = dpool("default", d_series());
    p.consolidation_policy = ConsolidationPolicy::Balanced;
    let plan = disrupt(&dsnapshot(vec![p.clone()], nodes.clone()));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert!(reasons(&plan, "a")[0].contains("is Balanced"), "{plan:#?}");
    // The default policy takes the same move.
    let mut plain = p.clone();
    plain.consolidation_policy = ConsolidationPolicy::WhenEmptyOrUnderutilized;
    assert!(disrupt(&dsnapshot(vec![plain], nodes)).command.is_some());
    // A move that saves most of the pool's cost is worth it.
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![filled(d("big", "Standard_D16s_v5"), 1, 1000)],
    ));
    assert_eq!(command(&plan).candidates, ["big"]);
}

// ---- Drift ----

#[test]
fn a_drifted_node_is_replaced_before_any_consolidation() {
    // With consolidation off too: then only the drifted node's pods are
    // prepared for moving, and the node consolidation skips still takes them.
    for consolidate_after in ["0s", "Never"] {
        let mut p = dpool("default", d_series());
        p.consolidate_after = consolidate_after.into();
        let mut drifted = filled(d("drifted", "Standard_D4s_v5"), 1, 3000);
        drifted.node_pool_hash_drifted = true;
        let plan = disrupt(&dsnapshot(
            vec![p],
            vec![drifted, filled(d("oversized", "Standard_D32s_v5"), 1, 500)],
        ));
        let cmd = command(&plan);
        assert_eq!(cmd.method, Method::Drift);
        assert_eq!(cmd.reason, DisruptionReason::Drifted);
        assert_eq!(cmd.candidates, ["drifted"]);
        // Its pod fits on the oversized node: no replacement needed.
        assert!(!cmd.is_replace(), "{consolidate_after}: {cmd:#?}");
        assert_eq!(
            reasons(&plan, "oversized"),
            ["Another command came first this round: Drift"]
        );
    }
}

#[test]
fn requirement_drift_replaces_into_the_new_requirements() {
    let mut p = dpool("default", d_series());
    p.pool.requirements = vec![req(ZONE, Operator::In, &["zone-2"])];
    let plan = disrupt(&dsnapshot(
        vec![p],
        vec![filled(d("old-zone", "Standard_D4s_v5"), 1, 1000)],
    ));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Drift);
    let claim = &cmd.replacements.new_node_claims[0];
    assert_eq!(zone_of(claim), "zone-2");
}

#[test]
fn provider_drift_and_empty_drifted_nodes() {
    let mut a = d("a", "Standard_D4s_v5");
    a.provider_drift = Some("ImageDrifted".into());
    let mut b = d("b", "Standard_D4s_v5");
    b.node_pool_hash_drifted = true;
    let mut p = dpool("default", d_series());
    // Emptiness is off here, so drift takes both empty nodes at once.
    p.consolidate_after = "Never".into();
    let plan = disrupt(&dsnapshot(vec![p.clone()], vec![a, b]));
    let cmd = command(&plan);
    assert_eq!(cmd.method, Method::Drift);
    assert_eq!(cmd.candidates, ["a", "b"]);
    // Busy drifted nodes go one at a time, oldest drift first.
    let mut a = filled(d("a", "Standard_D4s_v5"), 1, 1000);
    a.provider_drift = Some("ImageDrifted".into());
    a.drifted_since = Some(NOW - 60);
    let mut b = filled(d("b", "Standard_D4s_v5"), 1, 1000);
    b.node_pool_hash_drifted = true;
    b.drifted_since = Some(NOW - 600);
    let plan = disrupt(&dsnapshot(vec![p], vec![a, b]));
    assert_eq!(command(&plan).candidates, ["b"]);
}

#[test]
fn drift_respects_do_not_disrupt_and_its_budget() {
    // On-demand only and full: consolidation has nothing to offer.
    let mut p = on_demand_only(dpool("default", d_series()));
    p.budgets = vec![Budget {
        nodes: "0".into(),
        reasons: vec![DisruptionReason::Drifted],
        ..Budget::default()
    }];
    let mut a = filled(d("a", "Standard_D4s_v5"), 1, 3000);
    a.node_pool_hash_drifted = true;
    let plan = disrupt(&dsnapshot(vec![p], vec![a.clone()]));
    assert!(plan.command.is_none(), "{plan:#?}");
    assert_eq!(
        reasons(&plan, "a")[0],
        "No allowed disruptions for disruption reason Drifted due to blocking budget"
    );
    a.do_not_disrupt = Some("true".into());
    let plan = disrupt(&dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![a],
    ));
    assert!(plan.command.is_none());
    assert_eq!(kinds(&plan, "a"), [KeepKind::DisruptionBlocked]);
}

// ---- Expiration ----

#[test]
fn expired_nodes_are_listed_whatever_protects_them() {
    let mut old = filled(d("old", "Standard_D4s_v5"), 1, 1000);
    old.created = NOW - 31 * DAY;
    old.do_not_disrupt = Some("true".into());
    let mut young = filled(d("young", "Standard_D4s_v5"), 1, 1000);
    young.created = NOW - 29 * DAY;
    young.do_not_disrupt = Some("true".into());
    let mut p = dpool("default", d_series());
    p.budgets = vec![Budget {
        nodes: "0".into(),
        ..Budget::default()
    }];
    let plan = disrupt(&dsnapshot(vec![p.clone()], vec![old.clone(), young]));
    assert_eq!(plan.expired, ["old"]);
    assert!(plan.kept.iter().all(|k| k.name != "old"));
    p.expire_after = "Never".into();
    assert!(disrupt(&dsnapshot(vec![p], vec![old])).expired.is_empty());
}

#[test]
fn a_node_expires_by_its_own_expire_after_not_its_pools_new_one() {
    let mut node = filled(d("node", "Standard_D4s_v5"), 1, 1000);
    node.created = NOW - 2 * DAY;
    node.expire_after = Some("24h".into());
    let p = dpool("default", d_series());
    assert_eq!(p.expire_after, "720h");
    let plan = disrupt(&dsnapshot(vec![p.clone()], vec![node.clone()]));
    assert_eq!(plan.expired, ["node"], "its own 24h has passed");
    // A NodePool shortened after the node was made does not expire it (the
    // host sees the NodePool's hash change and drifts it instead).
    let mut shortened = p;
    shortened.expire_after = "1h".into();
    node.expire_after = Some("720h".into());
    assert!(
        disrupt(&dsnapshot(vec![shortened], vec![node]))
            .expired
            .is_empty()
    );
}

// ---- Input ----

#[test]
fn json_input_takes_karpenters_defaults() {
    let s: DisruptionSnapshot = serde_json::from_str(
        r#"{"now": 1715774400, "node_pools": [{"pool": {"name": "default"}}]}"#,
    )
    .unwrap();
    let p = &s.node_pools[0];
    assert_eq!(
        p.consolidation_policy,
        ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(p.consolidate_after, "0s");
    assert_eq!(p.expire_after, "720h");
    assert_eq!(p.budgets[0].nodes, "10%");
    assert!(!s.options.spot_to_spot_consolidation);
    let plan = disrupt(&s);
    assert!(plan.command.is_none() && plan.kept.is_empty());
    let back: DisruptionPlan =
        serde_json::from_str(&serde_json::to_string(&plan).unwrap()).unwrap();
    assert_eq!(back, plan);
}

// ---- Validation ----

fn three_with_one_pod_each(a: usize, c: usize) -> DisruptionSnapshot {
    dsnapshot(
        vec![on_demand_only(dpool("default", d_series()))],
        vec![
            filled(d("a", "Standard_D4s_v5"), a, 1000),
            filled(d("b", "Standard_D4s_v5"), 1, 1000),
            filled(d("c", "Standard_D4s_v5"), c, 1000),
        ],
    )
}

#[test]
fn a_command_still_holds_when_more_pods_left_meanwhile() {
    let cmd = command(&disrupt(&three_with_one_pod_each(1, 1))).clone();
    assert_eq!(cmd.method, Method::MultiNodeConsolidation);
    assert_eq!(cmd.candidates, ["a", "b"]);
    // A scale-down goes on: a loses its pod. Deciding again now finds
    // another command (a is empty); the one decided still holds, and acts.
    let after = three_with_one_pod_each(0, 1);
    assert_ne!(disrupt(&after).command.as_ref(), Some(&cmd));
    let valid = validate(&after, &cmd).expect("still valid");
    assert_eq!(valid.candidates, cmd.candidates);
    assert!(!valid.is_replace());
    assert_eq!(valid.replacements.placements.len(), 1, "b's pod, to c");
}

#[test]
fn a_command_no_longer_holds_when_its_pods_would_need_more() {
    let cmd = command(&disrupt(&three_with_one_pod_each(1, 1))).clone();
    assert!(!cmd.is_replace());
    // c filled up meanwhile: a's and b's pods would need a new node, one
    // no cheaper than what they leave (a D4 of the kept type).
    let why = validate(&three_with_one_pod_each(1, 3), &cmd).expect_err("no longer valid");
    assert_eq!(why, "Can't replace with a cheaper node");

    // An emptiness command whose node got a pod, or whose node is gone.
    let pool = || on_demand_only(dpool("default", d_series()));
    let busy_a = || filled(d("a", "Standard_D4s_v5"), 1, 1000);
    let cmd = command(&disrupt(&dsnapshot(
        vec![pool()],
        vec![busy_a(), d("idle", "Standard_D4s_v5")],
    )))
    .clone();
    assert_eq!(cmd.method, Method::Emptiness);
    let busy = dsnapshot(
        vec![pool()],
        vec![busy_a(), filled(d("idle", "Standard_D4s_v5"), 1, 500)],
    );
    assert_eq!(
        validate(&busy, &cmd).expect_err("busy"),
        "node idle is no longer empty"
    );
    let gone = dsnapshot(vec![pool()], vec![busy_a()]);
    assert_eq!(
        validate(&gone, &cmd).expect_err("gone"),
        "node idle is gone"
    );
}
