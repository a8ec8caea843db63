//! `karpenter simulate --cluster` against a running controller: what it
//! plans for a change is what the controller then does.

use crate::common;

use common::cluster::*;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

const FAST: [&str; 5] = [
    "--disable-leader-election",
    "--disruption-interval",
    "2s",
    "--disruption-validation",
    "5s",
];

/// Runs `karpenter simulate --cluster` with `extra` arguments; its JSON and
/// exit status.
fn simulate(c: &Cluster, plugins: &Path, extra: &[&str]) -> (Value, Option<i32>) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--cluster", "--output", "json", "--plugin-dir"])
        .arg(plugins)
        .args(extra)
        .env("KUBECONFIG", &c.kubeconfig)
        .output()
        .expect("karpenter simulate");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "simulate printed no JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (json, out.status.code())
}

fn write(dir: &Path, name: &str, object: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(object).expect("json")).expect("write");
    path.display().to_string()
}

/// Instance type to count, of the planned NodeClaims.
fn planned_types(sim: &Value) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in sim["simulation"]["plan"]["new_node_claims"]
        .as_array()
        .expect("claims")
    {
        let ty = c["cheapest"]["instance_type"].as_str().expect("a type");
        *out.entry(ty.to_string()).or_default() += 1;
    }
    out
}

/// Pods of `ns` the provisioning plan leaves pending (other tests' pods
/// may wait in the shared cluster).
fn pending_in(sim: &Value, ns: &str) -> usize {
    sim["simulation"]["plan"]["unschedulable"]
        .as_array()
        .expect("unschedulable")
        .iter()
        .filter(|u| u["pod"]["namespace"] == ns)
        .count()
}

fn node_names(nodes: &[k8s_openapi::api::core::v1::Node]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.name_any()).collect()
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn simulate_cluster_plans_what_the_controller_then_does() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let id = std::process::id();
    let (ns, pool) = (format!("e2e-whatif-{id}"), format!("whatif-{id}"));
    namespace(&client, &ns).await;
    apply(&c, node_class());
    let mut reqs = requirements_on_demand_amd64();
    reqs.as_array_mut().expect("a list").extend([
        json!({"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["4"]}),
        json!({"key": "karpenter.kwok.sh/instance-family", "operator": "In", "values": ["c"]}),
    ]);
    let mut np = node_pool(&pool, reqs.clone());
    np["spec"]["disruption"]["budgets"] = json!([{"nodes": "100%"}]);
    apply(&c, np.clone());
    apply(&c, deployment(&ns, "inflate", &pool, 5, "1", false));
    let controller = Controller::start(&c, &[], &FAST);
    let plugins = controller.dir.path().join("plugins");
    wait_for("5 pods running", Duration::from_secs(120), || {
        pods_running(&client, &ns, "inflate", 5)
    })
    .await;
    let files = tempfile::tempdir().expect("tempdir");

    // Scaled from 5 to 50: the NodeClaims the controller then creates.
    let fifty = write(
        files.path(),
        "fifty.json",
        &deployment(&ns, "inflate", &pool, 50, "1", false),
    );
    let before = node_names(&kwok_nodes(&client, &pool).await);
    let (sim, code) = simulate(&c, &plugins, &[&fifty]);
    assert_eq!(code, Some(3), "the cluster would change: {sim}");
    assert_eq!(
        sim["applied"][0],
        format!("deployment {ns}/inflate scaled from 5 to 50 pods"),
        "the running pods stay where they are"
    );
    let planned = planned_types(&sim);
    let diff = &sim["simulation"]["diff"];
    assert_eq!(pending_in(&sim, &ns), 0, "{diff}");
    eprintln!("simulate --cluster planned {planned:?} for 45 more pods");
    apply(
        &c,
        serde_json::from_str(&std::fs::read_to_string(&fifty).expect("read")).expect("json"),
    );
    wait_for("50 pods running", Duration::from_secs(180), || {
        pods_running(&client, &ns, "inflate", 50)
    })
    .await;
    // Nodes the provisioner planned pending pods onto are nominated, and no
    // disruption candidate, for 20 s after (as in Karpenter). Nominations
    // live in the controller's memory, out of simulate's sight.
    let nominations_end = std::time::Instant::now() + Duration::from_secs(22);
    // Drift passes over nodes still initializing.
    wait_for("every NodeClaim ready", Duration::from_secs(60), || {
        claims_ready(&client, &pool)
    })
    .await;
    let mut created = BTreeMap::<String, usize>::new();
    for n in kwok_nodes(&client, &pool).await {
        if !before.contains(&n.name_any()) {
            let ty = n.labels().get("node.kubernetes.io/instance-type").cloned();
            *created.entry(ty.expect("typed")).or_default() += 1;
        }
    }
    assert_eq!(
        created, planned,
        "the controller launched what simulate planned"
    );

    // A NodePool change that excludes family c: every node drifts.
    let mut m_family = np.clone();
    for r in m_family["spec"]["template"]["spec"]["requirements"]
        .as_array_mut()
        .expect("requirements")
    {
        if r["key"] == "karpenter.kwok.sh/instance-family" {
            r["values"] = json!(["m"]);
        }
    }
    let change = write(files.path(), "pool.json", &m_family);
    let (sim, code) = simulate(&c, &plugins, &["--disruption", &change]);
    assert_eq!(code, Some(3), "{sim}");
    let steps = sim["simulation"]["disruption"]["steps"]
        .as_array()
        .expect("steps");
    let drifted: BTreeSet<String> = steps
        .iter()
        .filter(|s| s["method"] == "Drift")
        .flat_map(|s| s["removed"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    let now = node_names(&kwok_nodes(&client, &pool).await);
    let kept: Vec<&Value> = sim["simulation"]["disruption"]["kept"]
        .as_array()
        .expect("kept")
        .iter()
        .filter(|k| k["name"].as_str().is_some_and(|n| !drifted.contains(n)))
        .collect();
    assert_eq!(
        drifted, now,
        "every node of family c drifts; kept: {kept:?}"
    );
    let diff = &sim["simulation"]["diff"];
    for n in diff["added"].as_array().expect("added") {
        let ty = n["instance_type"].as_str().expect("a type");
        assert!(ty.starts_with("m-"), "replacements are of family m: {ty}");
        assert!(n["price"].as_f64().is_some_and(|p| p > 0.0), "priced: {n}");
    }
    assert!(diff["price_after"].as_f64() > Some(0.0), "{diff}");

    // Scaled to 1, then consolidation enabled: the nodes simulate names
    // are the ones the controller removes.
    scale(&client, &ns, "inflate", 1).await;
    wait_for("1 pod left", Duration::from_secs(60), || {
        pods_running(&client, &ns, "inflate", 1)
    })
    .await;
    tokio::time::sleep_until(nominations_end.into()).await;
    let mut consolidating = np.clone();
    consolidating["spec"]["disruption"]["consolidateAfter"] = json!("0s");
    let change = write(files.path(), "consolidate.json", &consolidating);
    let (sim, _) = simulate(&c, &plugins, &["--disruption", &change]);
    let removed: BTreeSet<String> = sim["simulation"]["diff"]["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .filter_map(|n| n["name"].as_str().map(str::to_string))
        .filter(|n| n.starts_with(&pool))
        .collect();
    let all = node_names(&kwok_nodes(&client, &pool).await);
    assert_eq!(
        removed.len(),
        all.len() - 1,
        "all but the busy node go: {sim}"
    );
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"disruption": {"consolidateAfter": "0s"}}})),
        )
        .await
        .expect("patch the NodePool");
    let expected: BTreeSet<String> = all.difference(&removed).cloned().collect();
    wait_for(
        "consolidation removes what simulate named",
        Duration::from_secs(180),
        || async {
            let left = node_names(&kwok_nodes(&client, &pool).await);
            if left == expected {
                Ok(())
            } else {
                Err(format!("nodes {left:?}, expected {expected:?}"))
            }
        },
    )
    .await;

    // A month on (--at), past the NodeClaims' expireAfter of 720h: every
    // node expires and its pods move to nodes launched then.
    let (sim, code) = simulate(&c, &plugins, &["--disruption", "--at", "+721h"]);
    assert_eq!(code, Some(3), "{sim}");
    let expired: BTreeSet<String> = sim["simulation"]["disruption"]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["method"] == "Expiration")
        .flat_map(|s| s["removed"].as_array().cloned().unwrap_or_default())
        .filter_map(|n| n.as_str().map(str::to_string))
        .filter(|n| n.starts_with(&pool))
        .collect();
    assert_eq!(expired, expected, "{sim}");
    // Other tests' pods may wait in the shared cluster; none is added.
    let diff = &sim["simulation"]["diff"];
    assert_eq!(
        diff["pods_pending_after"], diff["pods_pending_before"],
        "{sim}"
    );
    clean_up(&client, &ns, &pool).await;
}
