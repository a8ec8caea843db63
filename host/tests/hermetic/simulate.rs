//! `karpenter simulate` end to end over real plugins: manifests in, a plan
//! and reasons out.

use crate::common;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use karpenter::simulate::{self, manifests::Manifests};
use karpenter_runtime::Registry;
use std::path::PathBuf;

async fn registry() -> std::sync::Arc<Registry> {
    let dir = karpenter_test_plugins::providers();
    Registry::open(
        common::runtime(),
        Dir::open_ambient_dir(dir, ambient_authority()).expect("plugins dir"),
    )
    .await
    .expect("registry")
}

fn example(extra: &str) -> Manifests {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/kwok");
    let mut m = Manifests::default();
    for f in ["nodeclass.yaml", "nodepool.yaml", "inflate.yaml"] {
        m.add_yaml(f, &std::fs::read_to_string(root.join(f)).expect("example"))
            .expect("parses");
    }
    if !extra.is_empty() {
        m.add_yaml("extra", extra).expect("extra parses");
    }
    m
}

#[tokio::test]
async fn inflate_lands_on_one_cheapest_node_that_fits() {
    let sim = simulate::offline(&example(""), &*registry().await)
        .await
        .expect("simulates");
    assert_eq!(sim.pod_count, 5);
    assert!(
        sim.plan.unschedulable.is_empty(),
        "{:?}",
        sim.plan.unschedulable
    );
    assert_eq!(sim.plan.new_node_claims.len(), 1);
    let claim = &sim.plan.new_node_claims[0];
    let cheapest = claim.cheapest.as_ref().expect("an offering");
    // Five CPUs plus overhead need the 8-CPU compute-optimized amd64 Linux type, on demand as the pool asks.
    assert_eq!(cheapest.instance_type, "c-8x-amd64-linux");
    assert_eq!(cheapest.capacity_type, "on-demand");
    let types: Vec<&str> = sim.plan.instance_type_names(claim).collect();
    assert!(
        types.iter().all(|t| t.ends_with("-amd64-linux")),
        "{types:?}"
    );
    assert!(
        !types.contains(&"c-4x-amd64-linux"),
        "a 4-CPU type cannot hold 5 CPUs"
    );
}

#[tokio::test]
async fn a_node_overlay_changes_the_type_and_is_named_with_the_gate_on() {
    const OVERLAY: &str = "
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: cheap-m}
spec:
  requirements: [{key: karpenter.kwok.sh/instance-family, operator: In, values: [m]}]
  priceAdjustment: '-60%'
";
    let m = example(OVERLAY);
    let mut state = simulate::state::State::default();
    let now = jiff::Timestamp::now();
    state
        .apply(
            &m,
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        )
        .expect("applies");
    let registry = registry().await;
    let options = |node_overlay| simulate::Options {
        now: now.as_second(),
        node_overlay,
        ..simulate::Options::default()
    };
    let off = simulate::run(&state, &registry, options(false))
        .await
        .expect("simulates");
    let cheapest = |sim: &simulate::Simulation| {
        sim.plan.new_node_claims[0]
            .cheapest
            .clone()
            .expect("an offering")
    };
    assert_eq!(cheapest(&off).instance_type, "c-8x-amd64-linux");
    assert!(
        off.overlays[0].contains("feature gate is off"),
        "{:?}",
        off.overlays
    );

    let on = simulate::run(&state, &registry, options(true))
        .await
        .expect("simulates");
    let chosen = cheapest(&on);
    assert_eq!(chosen.instance_type, "m-8x-amd64-linux");
    assert_eq!(chosen.price_overlay.as_deref(), Some("cheap-m"));
    assert!(on.overlays.is_empty(), "{:?}", on.overlays);
}

#[tokio::test]
async fn a_pod_nothing_can_host_gets_a_reason() {
    let huge = r#"
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: default}
spec:
  containers:
    - name: c
      image: x
      resources: {requests: {cpu: "500"}}
"#;
    let sim = simulate::offline(&example(huge), &*registry().await)
        .await
        .expect("simulates");
    assert_eq!(sim.plan.unschedulable.len(), 1);
    let u = &sim.plan.unschedulable[0];
    assert_eq!(u.pod.name, "huge");
    assert!(u.reason.contains("cpu"), "{}", u.reason);
    assert_eq!(
        sim.plan.new_node_claims.len(),
        1,
        "the inflate pods still get their node"
    );
}

#[tokio::test]
async fn a_nodepool_whose_nodeclass_has_no_plugin_is_a_clear_error() {
    let other = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: elsewhere}
spec:
  template:
    spec:
      nodeClassRef: {group: example.com, kind: OtherNodeClass, name: x}
      requirements: []
"#;
    let err = simulate::offline(&example(other), &*registry().await)
        .await
        .err()
        .expect("fails");
    let text = format!("{err:#}");
    assert!(
        text.contains("nodepool elsewhere: no plugin serves example.com/OtherNodeClass"),
        "{text}"
    );
}

/// `karpenter` copied alone into an empty directory, with an empty home:
/// no checkout, no `make plugins`. It plans the bundled example and the
/// Azure example with the providers built into it.
#[test]
fn a_copy_of_the_binary_alone_plans_with_its_built_in_providers() {
    let dir = tempfile::tempdir().expect("tmp");
    let bin = dir.path().join("karpenter");
    std::fs::copy(env!("CARGO_BIN_EXE_karpenter"), &bin).expect("copy the binary");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("home");
    let azure = dir.path().join("azure");
    std::fs::create_dir(&azure).expect("azure");
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/azure");
    for f in ["nodeclass.yaml", "cpu_nodepool.yaml", "cpu_deployment.yaml"] {
        std::fs::copy(examples.join(f), azure.join(f)).expect("example");
    }
    let simulate = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .arg("simulate")
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("HOME", &home)
            .output()
            .expect("karpenter simulate runs");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
        stdout
    };

    let example = simulate(&[]);
    assert!(example.contains("c-8x-amd64-linux"), "{example}");
    assert!(
        example.contains("5 pods: 5 on new NodeClaims, 0 on existing nodes, 0 pending."),
        "{example}"
    );
    let azure = simulate(&["azure"]);
    assert!(azure.contains("azure-cpu-nodepool"), "{azure}");
    assert!(azure.contains("Standard_D"), "{azure}");
}

/// Every example plans offline with the built-in providers, each pod
/// placed: Nebius from its built-in catalog, saying its prices are
/// estimates. With `--disruption` each says what it adds (exit status 3).
#[test]
fn every_example_plans_offline() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("examples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "plugins"))
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 3, "{dirs:?}");
    for dir in dirs {
        let run = |extra: &[&str]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
                .args(["simulate", "--output", "json"])
                .args(extra)
                .arg(&dir)
                .output()
                .expect("karpenter simulate runs");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.code(), stdout, stderr)
        };
        let (code, stdout, stderr) = run(&[]);
        assert_eq!(code, Some(0), "{}: {stdout}\n{stderr}", dir.display());
        let plan: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        assert!(
            !plan["new_node_claims"]
                .as_array()
                .expect("claims")
                .is_empty(),
            "{}: {plan}",
            dir.display()
        );
        assert_eq!(
            plan["unschedulable"],
            serde_json::json!([]),
            "{}",
            dir.display()
        );
        if dir.ends_with("nebius") {
            assert!(stderr.contains("prices are estimates"), "{stderr}");
        }
        let (code, stdout, stderr) = run(&["--disruption"]);
        assert_eq!(code, Some(3), "{}: {stdout}\n{stderr}", dir.display());
        let sim: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        assert_eq!(sim["simulation"]["diff"]["pods_pending_after"], 0, "{sim}");
    }
}

/// The Azure guide's NodePool and AKSNodeClass, exactly as a user pipes
/// them to kubectl, with its inflate deployment scaled to 5: planned
/// offline onto one D-family node.
#[test]
fn the_azure_guides_manifests_plan_offline() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().expect("tmp");
    for (from, to) in [
        ("tests/crds/seeds/001-general-purpose.yaml", "nodepool.yaml"),
        ("examples/kwok/inflate.yaml", "inflate.yaml"),
    ] {
        std::fs::copy(root.join(from), dir.path().join(to)).expect("copy");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["simulate", "--output", "json"])
        .arg(dir.path())
        .output()
        .expect("karpenter simulate runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let claims = plan["new_node_claims"].as_array().expect("claims");
    assert_eq!(claims.len(), 1, "{plan}");
    let ty = claims[0]["cheapest"]["instance_type"]
        .as_str()
        .expect("a type");
    assert!(ty.starts_with("Standard_D"), "sku-family D: {ty}");
    assert_eq!(claims[0]["pods"].as_array().map(Vec::len), Some(5));
}
