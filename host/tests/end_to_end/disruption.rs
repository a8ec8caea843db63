//! End-to-end disruption: `karpenter controller` with the kwok plugin on a
//! real API server, scheduler, controller-manager and kwok. Needs
//! `KARPENTER_TEST_CLUSTER` (see tests/controller.rs). Disruption passes run
//! every 2 s with a 5 s validation here, to keep the scenarios short.

use crate::common;

use common::cluster::*;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

const FAST: [&str; 5] = [
    "--disable-leader-election",
    "--disruption-interval",
    "2s",
    "--disruption-validation",
    "5s",
];

/// One scenario's cluster, with the CRDs and the kwok NodeClass in place,
/// and its own namespace and NodePool name. Holds [`SERIAL`] while it lives.
struct Scenario {
    _serial: tokio::sync::MutexGuard<'static, ()>,
    c: Cluster,
    client: Client,
    ns: String,
    pool: String,
}

async fn scenario(what: &str) -> Scenario {
    let serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let id = std::process::id();
    let (ns, pool) = (format!("e2e-{what}-{id}"), format!("{what}-{id}"));
    namespace(&client, &ns).await;
    apply(&c, node_class());
    Scenario {
        _serial: serial,
        c,
        client,
        ns,
        pool,
    }
}

impl Scenario {
    /// Applies the NodePool and a Deployment `inflate` of `replicas` pods of
    /// `cpu` each (one per node when `spread`), starts a fast-disrupting
    /// controller and waits until every pod runs.
    async fn inflate(
        &self,
        np: serde_json::Value,
        replicas: i32,
        cpu: &str,
        spread: bool,
    ) -> Controller {
        let (c, ns) = (&self.c, self.ns.as_str());
        apply(c, np);
        apply(
            c,
            deployment(ns, "inflate", &self.pool, replicas, cpu, spread),
        );
        let controller = Controller::start(c, &[], &FAST);
        wait_for(
            &format!("{replicas} pods running"),
            Duration::from_secs(120),
            || pods_running(&self.client, ns, "inflate", replicas as usize),
        )
        .await;
        controller
    }
}

/// On-demand amd64 Linux nodes with 4 CPUs of the given kwok families.
fn four_cpu_requirements(families: &[&str]) -> serde_json::Value {
    let mut reqs = requirements_on_demand_amd64();
    reqs.as_array_mut().expect("a list").extend([
        json!({"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["4"]}),
        json!({"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": families}),
    ]);
    reqs
}

/// A NodePool of 4-CPU nodes (family c) that consolidates at once.
fn pool_of_four_cpu_nodes(name: &str) -> serde_json::Value {
    let mut np = node_pool(name, four_cpu_requirements(&["c"]));
    np["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s"
    });
    np
}

/// The events published about one object, as "Reason: note".
async fn events_of(client: &Client, name: &str) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

/// NodeClaim names of a pool.
async fn claim_names(client: &Client, pool: &str) -> BTreeSet<String> {
    claims_of(client, pool)
        .await
        .iter()
        .map(|c| c.name_any())
        .collect()
}

/// Two 4-CPU nodes with one 1.5-CPU "half" pod each: two "filler" pods that
/// must not share a node take one node each, a half pod joins each (two
/// would not fit beside a filler), then the fillers go.
async fn two_half_empty_nodes(c: &Cluster, client: &Client, ns: &str, pool: &str) {
    apply(c, deployment(ns, "filler", pool, 2, "1500m", true));
    wait_for("2 fillers running", Duration::from_secs(120), || {
        pods_running(client, ns, "filler", 2)
    })
    .await;
    // kube-scheduler puts each on the less loaded node: one per node.
    scale(client, ns, "half", 2).await;
    wait_for("2 half pods running", Duration::from_secs(60), || {
        pods_running(client, ns, "half", 2)
    })
    .await;
    assert_eq!(
        claims_of(client, pool).await.len(),
        2,
        "two nodes for four pods"
    );
    scale(client, ns, "filler", 0).await;
    wait_for(
        "the fillers gone, one half pod per node",
        Duration::from_secs(60),
        || async {
            let fillers = pods_running_count(client, ns, "filler").await;
            let nodes = pod_nodes(c, ns, "half");
            if fillers == 0 && nodes.len() == 2 {
                Ok(())
            } else {
                Err(format!("{fillers} fillers; half pods on {nodes:?}"))
            }
        },
    )
    .await;
}

/// The nodes a Deployment's pods are bound to.
fn pod_nodes(c: &Cluster, ns: &str, app: &str) -> BTreeSet<String> {
    kubectl(
        c,
        &[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("app={app}"),
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_string)
    .collect()
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_zero_budget_blocks_then_empty_nodes_go() {
    let s = scenario("empty").await;
    let (client, ns, pool) = (&s.client, s.ns.as_str(), s.pool.as_str());
    let mut np = pool_of_four_cpu_nodes(pool);
    np["spec"]["disruption"]["budgets"] =
        json!([{"nodes": "0", "schedule": "* * * * *", "duration": "1h"}]);
    let controller = s.inflate(np, 3, "1500m", true).await;
    let claims = claim_names(client, pool).await;
    assert_eq!(claims.len(), 3);

    scale(client, ns, "inflate", 0).await;
    let blocked = "No allowed disruptions for disruption reason Empty due to blocking budget";
    let first = claims.iter().next().expect("a claim").clone();
    wait_for(
        "the budget's DisruptionBlocked event",
        Duration::from_secs(60),
        || async {
            let events = events_of(client, &first).await;
            if events
                .iter()
                .any(|e| e == &format!("DisruptionBlocked: {blocked}"))
            {
                Ok(())
            } else {
                Err(format!("events: {events:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        claim_names(client, pool).await,
        claims,
        "nothing disrupted under a zero budget"
    );

    // Lift the budget: the empty nodes go.
    let patch = json!({"spec": {"disruption": {"budgets": [{"nodes": "10%"}]}}});
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the NodePool");
    let lifted = Instant::now();
    wait_for("the empty nodes gone", Duration::from_secs(120), || async {
        let left = claims_of(client, pool).await.len() + kwok_nodes(client, pool).await.len();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} NodeClaims and Nodes left"))
        }
    })
    .await;
    eprintln!(
        "empty nodes gone {:.1}s after the budget was lifted",
        lifted.elapsed().as_secs_f64()
    );
    assert!(
        events_of(client, &first)
            .await
            .iter()
            .any(|e| e == "DisruptionTerminating: Disrupting NodeClaim: Empty"),
        "the NodeClaim says why it went"
    );
    assert!(
        controller
            .metric("karpenter_nodeclaims_disrupted_total")
            .await
            >= 3.0
    );
    assert!(
        controller
            .metric("karpenter_voluntary_disruption_decisions_total")
            .await
            >= 1.0
    );
    clean_up(client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn two_half_empty_nodes_become_one_honouring_a_pdb() {
    let s = scenario("consolidate").await;
    let (c, client, ns, pool) = (&s.c, &s.client, s.ns.as_str(), s.pool.as_str());
    // Nodes of family s (4 GiB per CPU) first; consolidation waits until the
    // setup below is done; both nodes may go at once (the default budget,
    // 10%, allows one of two).
    let mut np = pool_of_four_cpu_nodes(pool);
    np["spec"]["template"]["spec"]["requirements"] = four_cpu_requirements(&["s"]);
    np["spec"]["disruption"]["consolidateAfter"] = json!("Never");
    np["spec"]["disruption"]["budgets"] = json!([{"nodes": "100%"}]);
    apply(c, np);
    apply(c, deployment(ns, "half", pool, 0, "1500m", false));
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "half", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "half"}}}
    }))
    .expect("a PDB");
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .expect("create the PDB");
    let _controller = Controller::start(c, &[], &FAST);
    two_half_empty_nodes(c, client, ns, pool).await;
    let before = claim_names(client, pool).await;

    // Widen the pool to the cheaper family c and let it consolidate: one
    // c node (half the memory) holds both pods for less than the two s
    // nodes. (Two nodes are never replaced by one of their own type: then
    // deleting one is better.)
    let patch = json!({"spec": {
        "disruption": {"consolidateAfter": "0s"},
        "template": {"spec": {"requirements": four_cpu_requirements(&["c", "s"])}}
    }});
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the NodePool");
    let started = Instant::now();
    let mut fewest_running = usize::MAX;
    loop {
        let running = pods_running_count(client, ns, "half").await;
        fewest_running = fewest_running.min(running);
        let claims = claim_names(client, pool).await;
        let nodes = pod_nodes(c, ns, "half");
        if running == 2 && claims.len() == 1 && claims.is_disjoint(&before) && nodes.len() == 1 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "not consolidated: {claims:?} (were {before:?}), pods on {nodes:?}, {running} running"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "two nodes became one in {:.1}s; fewest pods running meanwhile: {fewest_running}",
        started.elapsed().as_secs_f64()
    );
    assert!(fewest_running >= 1, "the PDB's minAvailable held");
    clean_up(client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_do_not_disrupt_pod_keeps_its_node() {
    let s = scenario("dnd").await;
    let (c, client, ns, pool) = (&s.c, &s.client, s.ns.as_str(), s.pool.as_str());
    let mut np = pool_of_four_cpu_nodes(pool);
    np["spec"]["disruption"]["consolidateAfter"] = json!("Never");
    apply(c, np);
    let mut d = deployment(ns, "half", pool, 0, "1500m", false);
    d["spec"]["template"]["metadata"]["annotations"] =
        json!({"karpenter.sh/do-not-disrupt": "true"});
    apply(c, d);
    let controller = Controller::start(c, &[], &FAST);
    two_half_empty_nodes(c, client, ns, pool).await;
    let before = claim_names(client, pool).await;

    let patch = json!({"spec": {"disruption": {"consolidateAfter": "0s"}}});
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the NodePool");
    let first = before.iter().next().expect("a claim").clone();
    wait_for(
        "the do-not-disrupt DisruptionBlocked event",
        Duration::from_secs(60),
        || async {
            let events = events_of(client, &first).await;
            if events.iter().any(|e| {
                e.starts_with("DisruptionBlocked: Pod") && e.contains("karpenter.sh/do-not-disrupt")
            }) {
                Ok(())
            } else {
                Err(format!("events: {events:?}"))
            }
        },
    )
    .await;
    // Several passes and a validation later, nothing moved.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(claim_names(client, pool).await, before, "both nodes kept");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["explain", "node", &first, "--plugin-dir"])
        .arg(controller.dir.path().join("plugins"))
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter explain node");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("stays")
            && text.contains("DisruptionBlocked: Pod")
            && text.contains("do-not-disrupt"),
        "explain node says why: {text}"
    );
    assert_eq!(pods_running_count(client, ns, "half").await, 2);
    clean_up(client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_node_pool_change_drifts_and_replaces_its_nodes() {
    let s = scenario("drift").await;
    let (client, ns, pool) = (&s.client, s.ns.as_str(), s.pool.as_str());
    let mut np = pool_of_four_cpu_nodes(pool);
    // Drift only: consolidation stays off.
    np["spec"]["disruption"]["consolidateAfter"] = json!("Never");
    np["spec"]["disruption"]["budgets"] = json!([{"nodes": "100%"}]);
    let _controller = s.inflate(np, 2, "1500m", true).await;
    let before = claim_names(client, pool).await;

    let patch =
        json!({"spec": {"template": {"metadata": {"labels": {"e2e": pool, "revision": "2"}}}}});
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the NodePool");
    let changed = Instant::now();
    wait_for("every node replaced", Duration::from_secs(240), || async {
        let claims = claim_names(client, pool).await;
        pods_running(client, ns, "inflate", 2).await?;
        let nodes = kwok_nodes(client, pool).await;
        let relabelled = nodes
            .iter()
            .filter(|n| n.labels().get("revision").map(String::as_str) == Some("2"))
            .count();
        if claims.is_disjoint(&before) && claims.len() == 2 && relabelled == 2 && nodes.len() == 2 {
            Ok(())
        } else {
            Err(format!(
                "claims {claims:?} (were {before:?}), {relabelled} of {} nodes relabelled",
                nodes.len()
            ))
        }
    })
    .await;
    eprintln!(
        "drifted nodes replaced in {:.1}s",
        changed.elapsed().as_secs_f64()
    );
    let old = before.iter().next().expect("a claim");
    assert!(
        events_of(client, old)
            .await
            .iter()
            .any(|e| e == "DisruptionTerminating: Disrupting NodeClaim: Drifted"),
        "the old NodeClaim says it drifted"
    );
    let mut launched = Vec::new();
    for claim in claim_names(client, pool).await {
        launched.extend(events_of(client, &claim).await);
    }
    assert!(
        launched
            .iter()
            .any(|e| e == "DisruptionLaunching: Launching NodeClaim: Drifted"),
        "a replacement says what it was launched for: {launched:?}"
    );
    clean_up(client, ns, pool).await;
}

async fn pods_running_count(client: &Client, ns: &str, app: &str) -> usize {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn an_expired_node_is_replaced() {
    let s = scenario("expire").await;
    let (c, client, ns, pool) = (&s.c, &s.client, s.ns.as_str(), s.pool.as_str());
    let mut np = node_pool(pool, requirements_on_demand_amd64());
    // Expiration is forceful: a budget of no nodes does not hold it back.
    np["spec"]["template"]["spec"]["expireAfter"] = json!("30s");
    np["spec"]["disruption"]["budgets"] = json!([{"nodes": "0"}]);
    let _controller = s.inflate(np, 1, "500m", false).await;
    let first = claim_names(client, pool).await;
    assert_eq!(first.len(), 1, "one node for one pod");

    wait_for(
        "the expired node replaced",
        Duration::from_secs(180),
        || async {
            let claims = claim_names(client, pool).await;
            pods_running(client, ns, "inflate", 1).await?;
            let on = pod_nodes(c, ns, "inflate");
            if claims.is_disjoint(&first) && !claims.is_empty() && on.is_subset(&claims) {
                Ok(())
            } else {
                Err(format!("claims {claims:?} (were {first:?}), pod on {on:?}"))
            }
        },
    )
    .await;
    let old = first.iter().next().expect("a claim");
    assert!(
        events_of(client, old)
            .await
            .iter()
            .any(|e| e == "DisruptionTerminating: Disrupting NodeClaim: Expired"),
        "the old NodeClaim says it expired"
    );
    clean_up(client, ns, pool).await;
}

/// A leader that dies mid-command leaves its candidates tainted
/// `karpenter.sh/disrupted`; the next leader removes the taint in its first
/// pass rather than leave the node refusing pods for good.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_taint_left_by_a_dead_leader_is_removed() {
    let s = scenario("stale-taint").await;
    let (client, ns, pool) = (&s.client, s.ns.as_str(), s.pool.as_str());
    let mut np = pool_of_four_cpu_nodes(pool);
    // Nothing may be disrupted: only the stale taint is at stake.
    np["spec"]["disruption"]["budgets"] = json!([{"nodes": "0"}]);
    let mut first = s.inflate(np, 2, "1500m", true).await;
    first.kill();
    let nodes = kwok_nodes(client, pool).await;
    assert_eq!(nodes.len(), 2);
    let tainted = nodes[0].name_any();
    let api = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    let mut taints = nodes[0]
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: "karpenter.sh/disrupted".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    api.patch(
        &tainted,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"taints": taints}})),
    )
    .await
    .expect("taint as a dying leader would");

    let next = Controller::start(&s.c, &[], &FAST);
    let started = Instant::now();
    wait_for(
        "the stale taint removed",
        Duration::from_secs(60),
        || async {
            let node = api.get(&tainted).await.map_err(|e| e.to_string())?;
            let has = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "karpenter.sh/disrupted");
            if has {
                Err("still tainted".into())
            } else {
                Ok(())
            }
        },
    )
    .await;
    eprintln!(
        "stale taint removed {:.1}s after the new controller started",
        started.elapsed().as_secs_f64()
    );
    assert!(
        next.log().contains("removed a stale disruption taint"),
        "the new controller removed it"
    );
    assert_eq!(kwok_nodes(client, pool).await.len(), 2, "no node removed");
    clean_up(client, ns, pool).await;
}

/// With NodeRepair on, a node whose Ready condition has said False for
/// longer than its plugin tolerates (the kwok plugin: 30 minutes) has its
/// NodeClaim deleted. kwok lets go of the node first, or it would mark it
/// Ready again at once.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn an_unhealthy_node_is_repaired() {
    let s = scenario("repair").await;
    let (c, client, ns, pool) = (&s.c, &s.client, s.ns.as_str(), s.pool.as_str());
    apply(c, node_pool(pool, requirements_on_demand_amd64()));
    apply(c, deployment(ns, "inflate", pool, 1, "500m", false));
    let mut args = FAST.to_vec();
    args.extend(["--feature-gates", "NodeRepair=true"]);
    let _controller = Controller::start(c, &[], &args);
    wait_for("1 pod running", Duration::from_secs(120), || {
        pods_running(client, ns, "inflate", 1)
    })
    .await;
    // The node keeps no pod, so its deletion waits on no drain.
    scale(client, ns, "inflate", 0).await;
    wait_for("no pod left", Duration::from_secs(60), || async {
        let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default().labels("app=inflate"))
            .await
            .map_err(|e| e.to_string())?;
        match pods.items.len() {
            0 => Ok(()),
            n => Err(format!("{n} pods")),
        }
    })
    .await;
    let claims = claims_of(client, pool).await;
    assert_eq!(claims.len(), 1, "one node for one pod");
    let claim = claims[0].name_any();
    let node = claims[0].node_name().expect("registered").to_string();

    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    nodes
        .patch(
            &node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kwok.x-k8s.io/node": null}}})),
        )
        .await
        .expect("kwok lets go of the node");
    let an_hour_ago = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1)).to_string();
    nodes
        .patch_status(
            &node,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": "Ready",
                "status": "False",
                "reason": "KubeletNotReady",
                "message": "container runtime is down",
                "lastHeartbeatTime": an_hour_ago,
                "lastTransitionTime": an_hour_ago,
            }]}})),
        )
        .await
        .expect("the node's Ready condition set");

    wait_for(
        "the NodeClaim repaired",
        Duration::from_secs(60),
        || async {
            let left = claim_names(client, pool).await;
            if left.contains(&claim) {
                Err(format!("{claim} still there"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    assert!(
        events_of(client, &claim)
            .await
            .iter()
            .any(|e| e == &format!("NodeRepair: Repairing NodeClaim: node {node} is unhealthy")),
        "the NodeClaim says why it went"
    );
    clean_up(client, ns, pool).await;
}
