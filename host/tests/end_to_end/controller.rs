//! End-to-end: `karpenter controller` with the kwok plugin against a real
//! API server, scheduler, controller-manager and kwok. Needs a cluster from
//! `tests/cluster/up NAME` and `KARPENTER_TEST_CLUSTER=NAME`; `.ci/run` does
//! both. The scenarios share one cluster, so they run one at a time.

use crate::common;

use common::cluster::*;
use k8s_openapi::api::coordination::v1::Lease;
use karpenter_controller::crds::NodePool;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn inflate_five_pods_get_nodes_that_become_ready() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    // Names unique to this run: a failed run's leftovers cannot interfere.
    let (ns, pool) = (
        &format!("e2e-inflate-{}", std::process::id()),
        &format!("inflate-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "inflate", pool, 0, "1", false));
    // Beside kwok, a plugin that cannot load: reported once, harmless.
    let junk = PluginSetup {
        name: "junk".into(),
        wasm: b"not a component".to_vec(),
        config: json!({}),
        secrets: vec![],
    };
    let controller = Controller::start_plugins(
        &c,
        &[PluginSetup::kwok(&c, &[]), junk],
        &["--disable-leader-election"],
    );

    let scaled = Instant::now();
    scale(&client, ns, "inflate", 5).await;
    wait_for("5 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "inflate", 5)
    })
    .await;
    eprintln!(
        "5 pods running {:.1}s after scaling",
        scaled.elapsed().as_secs_f64()
    );

    // A pod can run on its node a moment before the NodeClaim's own status
    // write lands; a user would see it true a moment later too.
    wait_for("NodeClaims Ready", Duration::from_secs(30), || {
        claims_ready(&client, pool)
    })
    .await;
    let claims = claims_of(&client, pool).await;
    let table = kubectl(
        &c,
        &[
            "get",
            "nodeclaims",
            "-l",
            &format!("karpenter.sh/nodepool={pool}"),
        ],
    );
    eprintln!("{table}");
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
    );
    for line in lines {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 7, "every column filled: {line}");
        assert_eq!(cols[2], "on-demand");
        assert!(cols[3].starts_with("test-zone-"), "{line}");
        assert_eq!(cols[5], "True", "{line}");
    }
    for claim in &claims {
        assert!(
            claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "NodePool" && o.name == pool)
        );
    }
    let nodes = kwok_nodes(&client, pool).await;
    assert_eq!(nodes.len(), claims.len(), "one Node per NodeClaim");
    for n in &nodes {
        let labels = n.labels();
        assert_eq!(
            labels.get("karpenter.sh/initialized").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get("karpenter.sh/registered").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get("e2e").map(String::as_str),
            Some(pool),
            "template labels synced"
        );
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
            "unregistered taint removed"
        );
        assert!(
            n.finalizers()
                .iter()
                .any(|f| f == "karpenter.sh/termination")
        );
    }
    // One line per lifecycle step and NodeClaim: an operator following one
    // claim through the log sees each step once.
    let log = controller.log();
    for claim in &claims {
        let name = claim.name_any();
        for step in ["launched", "registered"] {
            let lines = log
                .lines()
                .filter(|l| {
                    l.contains(&format!("\"message\":\"{step}\""))
                        && l.contains(&format!("\"nodeclaim\":\"{name}\""))
                })
                .count();
            assert_eq!(lines, 1, "{step} logged {lines} times for {name}");
        }
    }
    let failures = log
        .lines()
        .filter(|l| l.contains("plugin failed to load") && l.contains("\"plugin\":\"junk\""))
        .count();
    assert_eq!(
        failures, 1,
        "the broken plugin's failure logged {failures} times"
    );
    let events = kubectl(
        &c,
        &[
            "get",
            "events",
            "-A",
            "-o",
            "custom-columns=REASON:.reason,NOTE:.note,MESSAGE:.message",
        ],
    );
    // One event per NodeClaim on its way up, at Ready: the conditions keep
    // when each step happened.
    assert!(
        events
            .lines()
            .any(|l| l.contains("Status condition transitioned, Type: Ready")),
        "a Ready event:\n{events}"
    );
    // By the REASON column whole: the node controller's own events, such
    // as RegisteredNode, share the cluster.
    for reason in ["Launched", "Registered", "Initialized"] {
        assert!(
            !events
                .lines()
                .any(|l| l.split_whitespace().next() == Some(reason)),
            "no {reason} event of its own:\n{events}"
        );
    }
    assert!(
        controller
            .metric("karpenter_nodeclaims_created_total")
            .await
            >= 1.0
    );
    assert!(
        controller
            .metric("karpenter_nodeclaims_registered_total")
            .await
            >= 1.0
    );
    assert!(
        controller
            .metric("karpenter_pods_startup_duration_seconds_count")
            .await
            >= 5.0
    );
    // NodePool status is refreshed every few seconds.
    wait_for(
        "NodePool status counts the nodes",
        Duration::from_secs(30),
        || async {
            let np = Api::<NodePool>::all(client.clone())
                .get_status(pool)
                .await
                .map_err(|e| e.to_string())?;
            let nodes = np.status.and_then(|s| s.nodes);
            if nodes == Some(claims.len() as i64) {
                Ok(())
            } else {
                Err(format!("nodes {nodes:?}"))
            }
        },
    )
    .await;
    let status = Api::<NodePool>::all(client.clone())
        .get_status(pool)
        .await
        .expect("status");
    let status = status.status.expect("nodepool status written");
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{status:?}"
    );

    // `karpenter explain` on a pod nothing can host.
    apply(
        &c,
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "too-big", "namespace": ns},
            "spec": {
                "nodeSelector": {"e2e": pool},
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "5000"}}}]
            }
        }),
    );
    wait_for(
        "too-big marked unschedulable",
        Duration::from_secs(60),
        || async {
            let pod = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
                .get("too-big")
                .await
                .map_err(|e| e.to_string())?;
            let unschedulable = pod
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
            if unschedulable {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["explain", "pod", "too-big", "-n", ns, "--plugin-dir"])
        .arg(controller.dir.path().join("plugins"))
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter explain");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("cannot be scheduled"), "{text}");

    clean_up(&client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn insufficient_capacity_moves_to_the_next_offering() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    // Names unique to this run: a failed run's leftovers cannot interfere.
    let (ns, pool) = (
        &format!("e2e-ice-{}", std::process::id()),
        &format!("ice-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(
        &c,
        node_pool(
            pool,
            requirements_one_type("c-2x-amd64-linux", &["test-zone-a", "test-zone-b"]),
        ),
    );
    apply(&c, deployment(ns, "ice", pool, 0, "1", false));
    let controller = Controller::start(
        &c,
        &[("OUT_OF_CAPACITY", "c-2x-amd64-linux/test-zone-a/on-demand")],
        &["--disable-leader-election"],
    );
    scale(&client, ns, "ice", 1).await;
    wait_for("the pod runs", Duration::from_secs(120), || {
        pods_running(&client, ns, "ice", 1)
    })
    .await;
    let nodes = kwok_nodes(&client, pool).await;
    assert_eq!(nodes.len(), 1);
    assert_eq!(
        nodes[0]
            .labels()
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("test-zone-b"),
        "launched in the zone that had capacity"
    );
    assert!(
        controller.log().contains("insufficient capacity"),
        "the first launch failed on zone a:\n{}",
        controller.log()
    );
    // The pod was told why its first NodeClaim did not launch, and the
    // failure is counted under its reason.
    let told = wait_for_value(
        "the pod's LaunchFailed event",
        Duration::from_secs(30),
        || async {
            events(&client, Some(ns), "LaunchFailed")
                .await
                .into_iter()
                .map(|(_, m)| m)
                .find(|m| m.contains("(InsufficientCapacity)") && m.contains("test-zone-a"))
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    eprintln!("pod event: {told}");
    assert!(
        controller
            .metric("karpenter_cloudprovider_errors_total")
            .await
            >= 1.0
    );
    clean_up(&client, ns, pool).await;
}

/// A pod whose only offering is out of capacity is told so by an event,
/// and `karpenter explain pod` shows that last launch beside the reason it
/// still waits.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_pod_whose_launch_failed_is_told_why() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = (
        &format!("e2e-told-{}", std::process::id()),
        &format!("told-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(
        &c,
        node_pool(
            pool,
            requirements_one_type("c-2x-amd64-linux", &["test-zone-a"]),
        ),
    );
    apply(&c, deployment(ns, "told", pool, 1, "1", false));
    let controller = Controller::start(
        &c,
        &[("OUT_OF_CAPACITY", "c-2x-amd64-linux/test-zone-a/on-demand")],
        &["--disable-leader-election"],
    );
    let told = wait_for_value(
        "the pod's LaunchFailed event",
        Duration::from_secs(60),
        || async {
            events(&client, Some(ns), "LaunchFailed")
                .await
                .into_iter()
                .map(|(_, m)| m)
                .find(|m| m.contains("(InsufficientCapacity)"))
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let pod = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("app=told"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("the pod")
        .name_any();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["explain", "pod", &pod, "-n", ns, "--plugin-dir"])
        .arg(controller.dir.path().join("plugins"))
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter explain");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("event: {told}\n{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("last launch for it: NodeClaim")
            && text.contains("(InsufficientCapacity)")
            && text.contains("s ago)"),
        "{text}"
    );
    clean_up(&client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn killed_mid_launch_neither_leaks_nor_duplicates() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    // Names unique to this run: a failed run's leftovers cannot interfere.
    let (ns, pool) = (
        &format!("e2e-crash-{}", std::process::id()),
        &format!("crash-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    const N: usize = 50;
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    // Hostname anti-affinity: one node per pod, so N NodeClaims.
    apply(&c, deployment(ns, "crash", pool, 0, "100m", true));
    let mut first = Controller::start(
        &c,
        &[],
        &["--disable-leader-election", "--batch-idle-duration", "2s"],
    );
    scale(&client, ns, "crash", N as i32).await;
    // Kill it while the launches are under way.
    wait_for("launches under way", Duration::from_secs(60), || async {
        let claims = claims_of(&client, pool).await;
        let launched = claims.iter().filter(|c| c.is_true("Launched")).count();
        if launched >= 1 {
            Ok(())
        } else {
            Err(format!("{} NodeClaims, {launched} launched", claims.len()))
        }
    })
    .await;
    first.kill(); // SIGKILL
    let claims = claims_of(&client, pool).await;
    let launched = claims.iter().filter(|c| c.is_true("Launched")).count();
    eprintln!(
        "killed with {} NodeClaims, {launched} launched",
        claims.len()
    );

    let _second = Controller::start(&c, &[], &["--disable-leader-election"]);
    wait_for("all pods running", Duration::from_secs(180), || {
        pods_running(&client, ns, "crash", N)
    })
    .await;
    // Give garbage collection a pass to find any leak.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let claims = claims_of(&client, pool).await;
    let nodes = kwok_nodes(&client, pool).await;
    let claim_ids: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| c.provider_id().map(str::to_string))
        .collect();
    let node_ids: BTreeSet<String> = nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.clone())
        .collect();
    assert_eq!(claims.len(), N, "one NodeClaim per pod, none duplicated");
    assert_eq!(claim_ids.len(), N, "every NodeClaim launched once");
    assert_eq!(
        node_ids, claim_ids,
        "instances equal NodeClaims: none leaked"
    );
    clean_up(&client, ns, pool).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn only_the_leader_acts_and_a_standby_takes_over() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    // Names unique to this run: a failed run's leftovers cannot interfere.
    let (ns, pool) = (
        &format!("e2e-leader-{}", std::process::id()),
        &format!("leader-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    apply(&c, deployment(ns, "leader", pool, 0, "1", false));
    let _ = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .delete("karpenter-e2e-leader", &DeleteParams::default())
        .await;
    let lease = [
        "--leader-election-name",
        "karpenter-e2e-leader",
        "--leader-lease-duration",
        "6s",
        "--leader-renew-deadline",
        "4s",
        "--leader-retry-period",
        "1s",
    ];
    let mut a = Controller::start(
        &c,
        &[],
        &[&lease[..], &["--identity", "replica-a"]].concat(),
    );
    let mut b = Controller::start(
        &c,
        &[],
        &[&lease[..], &["--identity", "replica-b"]].concat(),
    );
    wait_for("a leader", Duration::from_secs(60), || async {
        lease_holder(&client, "karpenter-e2e-leader")
            .await
            .map(|_| ())
            .ok_or_else(|| "no holder".to_string())
    })
    .await;
    let holder = lease_holder(&client, "karpenter-e2e-leader")
        .await
        .expect("holder");
    let (leader, standby) = if holder == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    scale(&client, ns, "leader", 2).await;
    wait_for("2 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "leader", 2)
    })
    .await;
    assert!(leader.metric("karpenter_nodeclaims_created_total").await >= 1.0);
    assert_eq!(leader.metric("karpenter_leader").await, 1.0);
    assert_eq!(
        standby.metric("karpenter_nodeclaims_created_total").await,
        0.0,
        "the standby created nothing"
    );
    assert_eq!(standby.metric("karpenter_leader").await, 0.0);

    let killed = Instant::now();
    leader.kill();
    let new_holder = if holder == "replica-a" {
        "replica-b"
    } else {
        "replica-a"
    };
    wait_for(
        "the standby takes the lease",
        Duration::from_secs(30),
        || async {
            match lease_holder(&client, "karpenter-e2e-leader").await {
                Some(h) if h == new_holder => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    )
    .await;
    let handover = killed.elapsed();
    eprintln!(
        "handover took {:.1}s (lease duration 6s)",
        handover.as_secs_f64()
    );
    assert!(
        handover <= Duration::from_secs(8),
        "within the lease duration plus two retries: {handover:?}"
    );

    scale(&client, ns, "leader", 12).await;
    wait_for("12 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "leader", 12)
    })
    .await;
    assert!(
        standby.metric("karpenter_nodeclaims_created_total").await >= 1.0,
        "the new leader provisions"
    );
    clean_up(&client, ns, pool).await;
}

/// A TCP proxy to the API server that can be made a black hole: bytes in
/// flight and new connections are held, never answered nor closed, as when
/// a network partition cuts a replica off.
struct Partition {
    addr: std::net::SocketAddr,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _task: tokio::task::JoinHandle<()>,
}

impl Partition {
    async fn to(upstream: &str) -> Partition {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let upstream = upstream.to_string();
        let flag = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let ((dr, dw), (ur, uw)) = (down.into_split(), up.into_split());
                for (mut from, mut to) in [(dr, uw), (ur, dw)] {
                    let cut = flag.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 << 10];
                        loop {
                            let n = match from.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if cut.load(std::sync::atomic::Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Partition {
            addr,
            cut,
            _task: task,
        }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn a_leader_cut_off_from_the_api_server_stops_before_its_lease_can_be_taken() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let name = "karpenter-e2e-cutoff";
    let _ = Api::<Lease>::namespaced(client.clone(), "kube-system")
        .delete(name, &DeleteParams::default())
        .await;
    let upstream = c
        .endpoint
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let partition = Partition::to(&upstream).await;
    // The controller reaches the API server only through the partition.
    let mut kubeconfig: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig"))
            .expect("YAML");
    for cluster in kubeconfig["clusters"].as_array_mut().expect("clusters") {
        cluster["cluster"]["server"] = format!("https://{}", partition.addr).into();
    }
    let dir = tempfile::tempdir().expect("tmp");
    let proxied = dir.path().join("kubeconfig");
    std::fs::write(&proxied, kubeconfig.to_string()).expect("write");
    let mut through = c.clone();
    through.kubeconfig = proxied.to_string_lossy().into_owned();

    let (lease, renew) = (Duration::from_secs(6), Duration::from_secs(4));
    let mut leader = Controller::start(
        &through,
        &[],
        &[
            "--leader-election-name",
            name,
            "--leader-lease-duration",
            "6s",
            "--leader-renew-deadline",
            "4s",
            "--leader-retry-period",
            "1s",
            "--identity",
            "cut-off",
        ],
    );
    wait_for("it leads", Duration::from_secs(60), || async {
        if leader.metric("karpenter_leader").await == 1.0 {
            Ok(())
        } else {
            Err("not leading".to_string())
        }
    })
    .await;

    partition.cut();
    let cut = Instant::now();
    let status = loop {
        if let Some(status) = leader.exited() {
            break status;
        }
        assert!(
            cut.elapsed() < Duration::from_secs(60),
            "still running a minute after the partition"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let stopped = cut.elapsed();
    eprintln!(
        "the cut-off leader stopped {:.1}s after the partition (renew deadline {renew:?}, lease {lease:?})",
        stopped.as_secs_f64()
    );
    assert!(!status.success(), "it exits to start afresh");
    assert!(
        stopped < lease,
        "it must stop before another replica may take the lease: {stopped:?}"
    );
    assert!(
        leader.log().contains("not renewed in time"),
        "the log says why"
    );
}

/// Plugins load while the health endpoints already answer: a plugin that
/// takes long to compile (the JavaScript one, from an empty precompiled
/// cache) cannot make a startup probe give up on the pod.
#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn health_answers_while_plugins_are_still_compiling() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let js = PluginSetup {
        name: "static-inventory".into(),
        wasm: common::plugin_wasm("static-inventory"),
        config: json!({}),
        secrets: vec![],
    };
    let empty_cache = tempfile::tempdir().expect("tmp");
    let cache_arg = empty_cache.path().to_string_lossy().into_owned();
    let started = Instant::now();
    let controller = Controller::start_plugins(
        &c,
        &[PluginSetup::kwok(&c, &[]), js],
        &["--disable-leader-election", "--precompiled-dir", &cache_arg],
    );
    let healthz = format!("http://127.0.0.1:{}/healthz", controller.metrics);
    let healthy = loop {
        if reqwest::get(&healthz)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no /healthz within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let loaded_line = |log: &str| {
        log.lines()
            .any(|l| l.contains("plugin loaded") && l.contains("static-inventory"))
    };
    assert!(
        !loaded_line(&controller.log()),
        "the JavaScript plugin was compiled before /healthz answered ({healthy:?})"
    );
    wait_for(
        "the JavaScript plugin loaded",
        Duration::from_secs(300),
        || async {
            if loaded_line(&controller.log()) {
                Ok(())
            } else {
                Err("still compiling".to_string())
            }
        },
    )
    .await;
    eprintln!(
        "/healthz answered {:.1}s after start; the JavaScript plugin loaded {:.1}s after start",
        healthy.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
