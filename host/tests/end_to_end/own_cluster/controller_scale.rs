//! The controller at scale, for the figures in the docs (not run by CI: it
//! takes minutes). On a cluster from `tests/cluster/up NAME`:
//!
//!     KARPENTER_TEST_CLUSTER=NAME cargo test --release -p karpenter-host \
//!       --test end_to_end -- --ignored --nocapture own_cluster::controller_scale::
//!
//! 1,000 pods that each need their own node: the time from the batch closing
//! to all 1,000 NodeClaims created (from the controller's own log), then
//! 9,000 more pods on those 1,000 nodes, and the controller's peak RSS.
//!
//! With `KARPENTER_TEST_SCALE_KEEP=1` the test stops before the floor and
//! clean-up, leaving 1,000 nodes and 10,000 pods standing to start other
//! controllers against.
//!
//! To measure the binary the image ships, build it with `cargo build
//! --profile dist -p karpenter-host --bin karpenter` and name it in
//! `KARPENTER_TEST_CONTROLLER_BINARY`. Its resident code depends on how its
//! file came into the page cache: a copy just written by `cp` ran with 2.7
//! MiB more of it mapped than the same file read from disk. Drop the page
//! cache first (`sync; echo 3 > /proc/sys/vm/drop_caches`), so that it is
//! read from disk as a container reads its image.
//!
//! To see where the memory goes: build without mimalloc
//! (`--no-default-features`) and run with
//! `KARPENTER_TEST_CONTROLLER_WRAPPER=heaptrack`: each controller writes its
//! own `heaptrack.karpenter.NUMBER.zst` in `host/` (an `-o` name is used as
//! given, so two controllers would share it).

use crate::common;

use common::cluster::*;
use k8s_openapi::api::core::v1::Pod;
use karpenter_controller::crds::NodeClaim;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::time::{Duration, Instant};

/// At least `want` objects match, counted from a metadata-only list: the
/// API server this test times then serializes names, not whole objects.
async fn at_least<K>(api: &Api<K>, params: &ListParams, want: usize) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let n = api.list_metadata(params).await.map_or(0, |l| l.items.len());
    if n >= want {
        Ok(())
    } else {
        Err(format!("{n} of {want}"))
    }
}

/// Once a second rather than `wait_for`'s four times: the looking loads the
/// API server being timed.
const LOOK: Duration = Duration::from_secs(1);

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
#[ignore = "a measurement on a cluster of its own: KARPENTER_TEST_CLUSTER; takes minutes"]
async fn one_thousand_nodes_and_ten_thousand_pods() {
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = ("e2e-scale", "scale");
    namespace(&client, ns).await;
    apply(&c, node_class());
    // No limits: they count each launching NodeClaim at its largest allowed
    // type (up to 600 of them), as Karpenter does, so any limit this test
    // could set would cap the batch rather than measure it.
    let mut np = node_pool(pool, requirements_on_demand_amd64());
    np["spec"]
        .as_object_mut()
        .expect("a NodePool spec")
        .remove("limits");
    apply(&c, np);
    apply(&c, deployment(ns, "spread", pool, 0, "100m", true));
    apply(&c, deployment(ns, "fill", pool, 0, "10m", false));
    // A long window, so that one batch sees all 1,000 pods pending (the
    // scheduler marks them unschedulable one by one).
    let controller = Controller::start(
        &c,
        &[],
        &[
            "--disable-leader-election",
            "--batch-idle-duration",
            "5s",
            "--batch-max-duration",
            "60s",
            // The default, in place of the other tests' 5 s, which would
            // list all 1,000 Nodes through the plugin on the API server
            // being timed.
            "--gc-interval",
            "2m",
        ],
    );

    let started = Instant::now();
    scale(&client, ns, "spread", 1000).await;
    let claims = Api::<NodeClaim>::all(client.clone());
    let of_pool = ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}"));
    wait_for_every("1,000 NodeClaims", Duration::from_secs(300), LOOK, || {
        at_least(&claims, &of_pool, 1000)
    })
    .await;
    let created = started.elapsed();
    // One of them, as the floor measurement below copies it.
    let template = claims_of(&client, pool)
        .await
        .into_iter()
        .next()
        .expect("a NodeClaim");
    let batches: Vec<String> = controller
        .log()
        .lines()
        .filter(|l| l.contains("\"provisioned\""))
        .map(str::to_string)
        .collect();
    eprintln!(
        "1,000 NodeClaims exist {:.1}s after scaling; batches:",
        created.as_secs_f64()
    );
    for b in &batches {
        eprintln!("  {b}");
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let running = |app: &str| {
        ListParams::default()
            .labels(&format!("app={app}"))
            .fields("status.phase=Running")
    };
    let spread = running("spread");
    wait_for_every("1,000 pods running", Duration::from_secs(900), LOOK, || {
        at_least(&pods, &spread, 1000)
    })
    .await;
    eprintln!(
        "1,000 pods running {:.1}s after scaling, on {} NodeClaims",
        started.elapsed().as_secs_f64(),
        claims_of(&client, pool).await.len()
    );

    scale(&client, ns, "fill", 9000).await;
    let fill = running("fill");
    wait_for_every(
        "9,000 more pods running",
        Duration::from_secs(1800),
        LOOK,
        || at_least(&pods, &fill, 9000),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pid = controller.child.id();
    eprintln!(
        "controller with {} NodeClaims and 10,000 pods: RSS {} KiB, peak {} KiB",
        claims_of(&client, pool).await.len(),
        rss_kib(pid, "VmRSS:"),
        rss_kib(pid, "VmHWM:")
    );
    // The controller's log outlives the test, for reading its decisions.
    let log = std::env::temp_dir().join("karpenter-scale-controller.log");
    let _ = std::fs::write(&log, controller.log());
    eprintln!("controller log: {}", log.display());
    drop(controller);
    if std::env::var_os("KARPENTER_TEST_SCALE_KEEP").is_some() {
        return;
    }

    // The floor: the same 1,000 NodeClaims created straight into the API
    // server, as many at a time as the provisioner sends, with no
    // controller running and the cluster settled. Measured before clean-up,
    // which on a small machine can outlast its wait with this many nodes.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let floor = create_copies(&client, &template, 1000).await;
    eprintln!(
        "the API server alone creates 1,000 such NodeClaims in {:.1}s ({} bytes of JSON each)",
        floor.as_secs_f64(),
        serde_json::to_vec(&template).map_or(0, |v| v.len())
    );

    let controller = Controller::start(&c, &[], &["--disable-leader-election"]);
    clean_up_within(&client, ns, pool, Duration::from_secs(600)).await;
    drop(controller);
}

/// Creates `n` copies of `template` (as many at a time as the provisioner)
/// under a NodePool name no controller knows, then deletes them; returns how
/// long the creates took.
async fn create_copies(client: &kube::Client, template: &NodeClaim, n: usize) -> Duration {
    use futures::StreamExt;
    let api: Api<NodeClaim> = Api::all(client.clone());
    let mut copy = NodeClaim::new("", template.spec.clone());
    copy.metadata.generate_name = Some("apibench-".into());
    copy.metadata.labels =
        Some([("karpenter.sh/nodepool".to_string(), "apibench".to_string())].into());
    copy.metadata.annotations = template.metadata.annotations.clone();
    copy.metadata.name = None;
    let started = Instant::now();
    let failed = futures::stream::iter(0..n)
        .map(|_| {
            let (api, copy) = (api.clone(), copy.clone());
            async move { api.create(&PostParams::default(), &copy).await.is_err() }
        })
        .buffered(karpenter_controller::provisioner::CREATES_IN_FLIGHT)
        .filter(|failed| std::future::ready(*failed))
        .count()
        .await;
    let took = started.elapsed();
    assert_eq!(failed, 0, "creates failed");
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("karpenter.sh/nodepool=apibench"),
    )
    .await
    .expect("delete the copies");
    took
}
