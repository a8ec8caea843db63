//! End-to-end: `karpenter viewer` on the local control plane during an
//! inflate, as a person uses it: `--once` for a script, the live view in
//! tmux (send-keys, capture-pane) until a new node shows in its frame, its
//! keys for sorting and filtering, `q`; and as `kubectl karpenter viewer`.
//!
//! Needs a cluster (`KARPENTER_TEST_CLUSTER`) and tmux.

use crate::common;

use common::cluster::*;
use kube::ResourceExt;
use std::process::Command;
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux (apt-get install tmux)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The node lines of a frame for `pool`'s nodes.
fn node_lines<'a>(frame: &'a str, names: &[String]) -> Vec<&'a str> {
    frame
        .lines()
        .filter(|l| names.iter().any(|n| l.trim_start().starts_with(n.as_str())))
        .collect()
}

/// Waits until the pane passes `check`.
async fn shows(pane: &impl Fn() -> String, what: &str, check: impl Fn(&str) -> bool) {
    wait_for(what, Duration::from_secs(10), || async {
        let p = pane();
        if check(&p) { Ok(()) } else { Err(p) }
    })
    .await
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn the_viewer_shows_the_nodes_as_they_come() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, pool) = (
        &format!("e2e-viewer-{}", std::process::id()),
        &format!("viewer-{}", std::process::id()),
    );
    let (ns, pool) = (ns.as_str(), pool.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    apply(&c, node_pool(pool, requirements_on_demand_amd64()));
    // One pod per node.
    apply(&c, deployment(ns, "view", pool, 3, "1", true));
    // A pod no instance type of the pool can hold stays pending, and the
    // header gives the engine's reason.
    apply(&c, deployment(ns, "huge", pool, 1, "1000", false));
    let controller = Controller::start(&c, &[], &["--disable-leader-election"]);
    wait_for("3 pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "view", 3)
    })
    .await;
    let names = |nodes: Vec<k8s_openapi::api::core::v1::Node>| -> Vec<String> {
        nodes.iter().map(|n| n.name_any()).collect()
    };
    let nodes = names(kwok_nodes(&client, pool).await);
    assert_eq!(nodes.len(), 3);
    let plugins = controller.dir.path().join("plugins");
    let viewer = env!("CARGO_BIN_EXE_karpenter");

    // Once, for a script.
    let out = Command::new(viewer)
        .args(["viewer", "--once", "--nodepool", pool, "--plugin-dir"])
        .arg(&plugins)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter viewer --once");
    let frame = String::from_utf8_lossy(&out.stdout);
    eprintln!("{frame}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(frame.starts_with("3 nodes  3 pods  $"), "{frame}");
    // The pending count is the cluster's, and other tests share it: at
    // least this pod, and a reason for the largest group that cannot go.
    let header = frame.lines().next().unwrap_or_default();
    let pending = header
        .split_once(" pending")
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(
        pending.is_some_and(|n| n >= 1) && header.contains(" cannot be scheduled: "),
        "{header}"
    );
    assert!(
        frame.contains(&format!("NodePool {pool}: 3 nodes, $")),
        "{frame}"
    );
    let lines = node_lines(&frame, &nodes);
    assert_eq!(lines.len(), 3, "{frame}");
    for l in &lines {
        assert!(l.contains(" ready "), "{l}");
        assert!(l.contains("on-demand") && l.contains("test-zone-"), "{l}");
        // Requested CPU and memory as bars, and a price.
        assert_eq!(l.matches('[').count(), 2, "{l}");
        assert!(
            l.trim_end()
                .rsplit(' ')
                .next()
                .is_some_and(|p| p.parse::<f64>().is_ok_and(|p| p > 0.0)),
            "{l}"
        );
    }

    // Live, in tmux, as a person keeps it open.
    let session = format!("viewer-{}", std::process::id());
    let command = format!(
        "KUBECONFIG={} {viewer} viewer --interval 1s --nodepool {pool} --plugin-dir {}",
        c.kubeconfig,
        plugins.display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "220",
        "-y",
        "50",
        &command,
    ]);
    let pane = || tmux(&["capture-pane", "-p", "-t", &session]);
    wait_for(
        "the live frame shows 3 nodes",
        Duration::from_secs(60),
        || async {
            let p = pane();
            if node_lines(&p, &nodes).len() == 3 && p.contains("q quit  s sort: name") {
                Ok(())
            } else {
                Err(p)
            }
        },
    )
    .await;
    scale(&client, ns, "view", 4).await;
    let appeared = wait_for_value("a 4th node", Duration::from_secs(120), || async {
        let now = names(kwok_nodes(&client, pool).await);
        if now.len() == 4 {
            Ok((now, Instant::now()))
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
    let (four, at) = appeared;
    wait_for(
        "the live frame shows the 4th node",
        Duration::from_secs(30),
        || async {
            let p = pane();
            if node_lines(&p, &four).len() == 4 {
                Ok(())
            } else {
                Err(p)
            }
        },
    )
    .await;
    eprintln!(
        "the new node showed in the live frame {:.1} s after it registered:\n{}",
        at.elapsed().as_secs_f64(),
        pane()
    );
    let keys = |keys: &[&str]| {
        let mut args = vec!["send-keys", "-t", &session];
        args.extend_from_slice(keys);
        tmux(&args);
    };
    keys(&["s"]);
    shows(&pane, "s sorts by price", |p| p.contains("s sort: price")).await;
    let selector = format!("e2e={pool}");
    keys(&["/"]);
    keys(&["-l", &selector]);
    keys(&["Enter"]);
    shows(&pane, "a label selector that keeps the pool's nodes", |p| {
        p.contains(&format!("labels: {selector}")) && node_lines(p, &four).len() == 4
    })
    .await;
    keys(&["/", "C-u"]);
    keys(&["-l", "x=y"]);
    keys(&["Enter"]);
    shows(&pane, "a label selector that no node has", |p| {
        p.starts_with("0 nodes")
    })
    .await;
    keys(&["q"]);
    wait_for("the viewer exits on q", Duration::from_secs(10), || async {
        let listed = tmux(&["list-sessions"]);
        if listed.contains(&session) {
            Err(listed)
        } else {
            Ok(())
        }
    })
    .await;

    // As a kubectl plugin: `kubectl-karpenter` on PATH.
    let bin = tempfile::tempdir().expect("dir");
    std::os::unix::fs::symlink(viewer, bin.path().join("kubectl-karpenter")).expect("symlink");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&c.kubectl)
        .args([
            "karpenter",
            "viewer",
            "--once",
            "--nodepool",
            pool,
            "--plugin-dir",
        ])
        .arg(&plugins)
        .env("KUBECONFIG", &c.kubeconfig)
        .env("PATH", path)
        .output()
        .expect("kubectl karpenter viewer");
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(frame.starts_with("4 nodes  4 pods  $"), "{frame}");
    assert_eq!(node_lines(&frame, &four).len(), 4, "{frame}");

    clean_up(&client, ns, pool).await;
}
