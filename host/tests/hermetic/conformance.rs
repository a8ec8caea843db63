//! The conformance kit against purpose-built providers: an in-memory one that
//! keeps the contract passes; each that breaks one rule fails exactly that
//! check, with a message naming what is wrong.

use crate::common;

use karpenter::conformance::{self, Outcome, Report};
use karpenter_runtime::PluginConfig;
use std::collections::BTreeMap;

async fn test(plugin: &str, settings: &[(&str, &str)], cpu_ms: Option<u64>) -> Report {
    test_with(plugin, settings, |c| {
        if let Some(ms) = cpu_ms {
            c.cpu_ms = ms;
        }
    })
    .await
}

async fn test_with(
    plugin: &str,
    settings: &[(&str, &str)],
    tune: impl FnOnce(&mut PluginConfig),
) -> Report {
    let mut config = PluginConfig {
        settings: settings
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
        ..PluginConfig::default()
    };
    tune(&mut config);
    let plugin = common::runtime()
        .load(plugin, &common::plugin_wasm(plugin), config)
        .await
        .expect("plugin loads");
    let report = conformance::run(&plugin, &conformance::Options::default()).await;
    eprintln!("{report}");
    report
}

/// `karpenter plugin <command> <args>...`, run to its end.
fn plugin_cli(command: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["plugin", command])
        .args(args)
        .output()
        .expect("karpenter runs")
}

fn failure<'a>(report: &'a Report, id: &str) -> &'a str {
    match &report.get(id).expect("check ran").outcome {
        Outcome::Fail(why) => why,
        Outcome::Pass(detail) => panic!("{id} passed ({detail}), expected a failure"),
        Outcome::Skip(why) => panic!("{id} was skipped ({why}), expected a failure"),
    }
}

#[tokio::test]
async fn an_in_memory_provider_that_keeps_the_contract_passes_every_check() {
    let report = test("broken", &[], None).await;
    assert!(report.passed(), "{report}");
    assert!(report.checks.len() >= 15, "{report}");
}

#[tokio::test]
async fn a_missing_well_known_label_fails_that_check_only() {
    let report = test("broken", &[("MODE", "missing-label")], None).await;
    assert_eq!(report.failed(), ["well-known-labels"], "{report}");
    assert_eq!(
        failure(&report, "well-known-labels"),
        "instance type \"large\": does not define the well-known label kubernetes.io/os"
    );
}

#[tokio::test]
async fn a_negative_price_fails_that_check_only() {
    let report = test("broken", &[("MODE", "negative-price")], None).await;
    assert_eq!(report.failed(), ["prices"], "{report}");
    assert_eq!(
        failure(&report, "prices"),
        "instance type \"small\": offering zone-b/spot has price -0.01, not a finite non-negative number"
    );
}

#[tokio::test]
async fn a_create_that_is_not_idempotent_fails_that_check_and_is_cleaned_up() {
    let report = test("broken", &[("MODE", "not-idempotent")], None).await;
    assert_eq!(report.failed(), ["create-idempotent"], "{report}");
    let why = failure(&report, "create-idempotent");
    assert!(
        why.starts_with("a second create for NodeClaim conformance-")
            && why.contains("-2, the first broken://conformance-")
            && why.ends_with("-1: create must return the existing instance"),
        "{why}"
    );
}

#[tokio::test]
async fn garbage_and_a_runaway_loop_fail_the_catalog_and_sandbox_checks() {
    let report = test("misbehave", &[("MODE", "garbage")], None).await;
    assert!(
        failure(&report, "prices").contains("has price NaN"),
        "{report}"
    );
    assert!(
        failure(&report, "allocatable").contains("resource memory"),
        "{report}"
    );
    let report = test("misbehave", &[("MODE", "loop")], Some(200)).await;
    assert!(
        failure(&report, "sandbox-limits").contains("exceeded its CPU budget of 200 ms"),
        "{report}"
    );
    // misbehave's create is `other`, not insufficient-capacity.
    assert!(
        failure(&report, "unsatisfiable-create").contains("not implemented"),
        "{report}"
    );
}

/// What an instance says of itself must hold together: get answers with
/// what create launched, its Node's labels name its type and zone, and
/// allocatable never exceeds capacity.
#[tokio::test]
async fn an_instance_that_contradicts_itself_fails_the_check_that_saw_it() {
    for (mode, check, says) in [
        (
            "wrong-type-on-get",
            "get",
            "instance type \"large\", but create launched \"small\"",
        ),
        (
            "no-labels",
            "create",
            "no label node.kubernetes.io/instance-type among its labels",
        ),
        (
            "allocatable-above-capacity",
            "create",
            "allocatable memory 40Gi is above its capacity 4Gi",
        ),
        (
            "any-kind",
            "node-class-kind",
            "a ConformanceOtherNodeClass (conformance.karpenter.invalid) was reported Ready",
        ),
    ] {
        let report = test("broken", &[("MODE", mode)], None).await;
        assert_eq!(report.failed(), [check], "{mode}: {report}");
        let why = failure(&report, check);
        assert!(why.contains(says), "{mode}: {why}");
    }
}

/// A create that runs out of capacity fails the create check; it keeps the
/// contract only when its insufficient-capacity names the offering it tried.
#[tokio::test]
async fn an_insufficient_capacity_must_name_the_offerings_that_failed() {
    let report = test("broken", &[("MODE", "out-of-capacity")], None).await;
    assert_eq!(report.failed(), ["create"], "{report}");
    assert!(
        matches!(
            report
                .get("insufficient-capacity")
                .expect("checked")
                .outcome,
            Outcome::Pass(_)
        ),
        "{report}"
    );
    let report = test("broken", &[("MODE", "out-of-capacity-unnamed")], None).await;
    assert_eq!(
        report.failed(),
        ["create", "insufficient-capacity"],
        "{report}"
    );
    let why = failure(&report, "insufficient-capacity");
    assert!(why.contains("naming no offering"), "{why}");
}

/// The compact catalog is what the host uses, so it must say what
/// get-instance-types says, and a bad index in it fails the call, not the host.
#[tokio::test]
async fn a_compact_catalog_must_match_the_listed_one() {
    let report = test("broken", &[("MODE", "catalog-differs")], None).await;
    assert_eq!(report.failed(), ["compact-catalog"], "{report}");
    assert!(
        failure(&report, "compact-catalog").contains("instance type \"large\" differs"),
        "{report}"
    );
    // Without a compact catalog there is nothing to compare, and the check
    // says so rather than claiming a match.
    let report = test("broken", &[], None).await;
    match &report.get("compact-catalog").expect("checked").outcome {
        Outcome::Pass(detail) => assert!(detail.contains("answer none"), "{detail}"),
        other => panic!("{other:?}"),
    }
    let report = test("broken", &[("MODE", "catalog-bad-index")], None).await;
    let why = failure(&report, "get-instance-types");
    assert!(
        why.contains("returned an invalid result: instance type 0: string index")
            && why.contains("out of range"),
        "{why}"
    );
}

/// The same for the tables of contract 0.1.4, which the host asks first.
#[tokio::test]
async fn a_catalog_table_must_match_the_listed_one() {
    let report = test("broken", &[("MODE", "table-differs")], None).await;
    assert_eq!(report.failed(), ["compact-catalog"], "{report}");
    let why = failure(&report, "compact-catalog");
    assert!(why.contains("instance type \"large\" differs"), "{why}");
    let report = test("broken", &[("MODE", "table-bad-span")], None).await;
    let why = failure(&report, "get-instance-types");
    assert!(
        why.contains("returned an invalid result: instance type 0: span 0+")
            && why.contains("of offerings out of range"),
        "{why}"
    );
    // kwok answers tables, and they list what get-instance-types lists.
    let report = test("kwok", &[], None).await;
    match &report.get("compact-catalog").expect("checked").outcome {
        Outcome::Pass(detail) => assert!(
            detail.starts_with("get-table: 144 instance types"),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }
}

/// A call stopped at the memory limit is the sandbox's verdict, not a typed
/// error the plugin forgot.
#[tokio::test]
async fn a_call_past_the_memory_limit_fails_sandbox_limits() {
    let report = test_with("misbehave", &[("MODE", "alloc")], |c| c.memory_mib = 64).await;
    assert!(
        failure(&report, "sandbox-limits").contains("grew past its memory limit of 64 MiB"),
        "{report}"
    );
    assert!(
        !report.failed().contains(&"typed-errors"),
        "the limit is not counted twice: {report}"
    );
}

/// A catalog that cannot be had is one failure, with the guest's own panic
/// message; what needed it is skipped, not failed again.
#[tokio::test]
async fn a_failing_catalog_is_one_failure_and_what_needs_it_is_skipped() {
    let report = test("misbehave", &[("MODE", "panic")], None).await;
    let why = failure(&report, "get-instance-types");
    assert!(
        why.contains("panicked") && why.contains("the plugin panicked on purpose"),
        "{why}"
    );
    for id in [
        "well-known-labels",
        "offerings",
        "prices",
        "allocatable",
        "requirements",
        "create",
        "create-idempotent",
        "get",
        "list",
        "delete",
    ] {
        let check = report.get(id).expect("listed");
        assert!(
            matches!(&check.outcome, Outcome::Skip(why) if why.ends_with("failed")),
            "{id}: {:?}",
            check.outcome
        );
    }
    assert!(!report.passed());
    let text = report.to_string();
    assert!(text.contains("SKIP  create "), "{text}");
    assert!(!text.contains("no available offering"), "{text}");
    assert!(text.contains(" skipped"), "{text}");
}

/// The CLI prints a line per check and exits non-zero on a failure.
#[test]
fn the_cli_prints_each_check_and_exits_non_zero_on_a_failure() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("broken.yaml");
    std::fs::write(&config, "settings: {MODE: negative-price}\n").expect("write");
    let wasm = common::plugin_path("broken");
    let out = plugin_cli(
        "test",
        &[wasm.as_ref(), "--config".as_ref(), config.as_ref()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PASS  well-known-labels"), "{stdout}");
    assert!(
        stdout.contains("FAIL  prices")
            && stdout
                .contains("      instance type \"small\": offering zone-b/spot has price -0.01"),
        "{stdout}"
    );
    assert!(stdout.contains("passed, 1 failed"), "{stdout}");

    std::fs::write(&config, "settings: {}\n").expect("write");
    let out = plugin_cli(
        "test",
        &[wasm.as_ref(), "--config".as_ref(), config.as_ref()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `plugin call` prints the contract's names, as a provider author reads
/// them in the WIT: `capacity-type`, `operator: in`, not the Rust bindings'.
#[test]
fn plugin_call_speaks_the_contracts_names() {
    let out = plugin_cli(
        "call",
        &[
            common::plugin_path("kwok").as_ref(),
            "get-instance-types".as_ref(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let types: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    let first = &types[0];
    assert!(
        first["offerings"][0]["capacity-type"].is_string(),
        "{first}"
    );
    assert_eq!(first["requirements"][0]["operator"], "in", "{first}");
    assert!(
        !stdout.contains("_\":") && !stdout.contains("\"In\""),
        "{stdout}"
    );
}

/// A `.wasm.zst` plugin, as the plugin directory takes it, is one the CLI
/// inspects and calls too, under its name without the suffixes.
#[test]
fn the_cli_reads_a_compressed_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wasm = std::fs::read(common::plugin_path("kwok")).expect("kwok.wasm");
    let file = dir.path().join("kwok.wasm.zst");
    std::fs::write(&file, zstd::encode_all(&wasm[..], 3).expect("zstd")).expect("write");
    let out = plugin_cli("inspect", &[file.as_ref()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("kwok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = plugin_cli("call", &[file.as_ref(), "repair-policies".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `karpenter plugin inspect ... | head`: the reader going away ends the
/// command quietly, with no panic on stderr (`println!` panicked there).
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["plugin", "inspect"])
        .arg(common::plugin_path("kwok"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("karpenter runs");
    // Closed long before the plugin is loaded and its first line written.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// The Python example (examples/plugins/inventory, `make py-plugins`)
/// passes the kit with its example configuration.
#[test]
fn the_python_provider_passes_the_kit() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = plugin_cli(
        "test",
        &[
            common::plugin_path("inventory").as_ref(),
            "--config".as_ref(),
            root.join("examples/plugins/inventory/inventory.yaml")
                .as_ref(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" 0 failed, 0 skipped"), "{stdout}");
    assert!(stdout.contains("PASS  create-idempotent"), "{stdout}");
}

/// An exception the Python provider does not catch reaches the error with
/// its traceback's last line, not only as a trap.
#[test]
fn a_python_exception_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("inventory.yaml");
    std::fs::write(
        &config,
        r#"settings: {MACHINES: '[{"name": "m", "type": "t", "zone": "z", "cpu": "1", "memory": "1Gi", "price": "cheap"}]'}"#,
    )
    .expect("write");
    let out = plugin_cli(
        "call",
        &[
            common::plugin_path("inventory").as_ref(),
            "get-instance-types".as_ref(),
            "--config".as_ref(),
            config.as_ref(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("ValueError: could not convert string to float: 'cheap'"),
        "{stderr}"
    );
}

/// A plugin whose metadata breaks the contract does not load; the kit says
/// so as its `metadata` check's failure, not as an abort.
#[test]
fn metadata_that_breaks_the_contract_is_a_failed_check() {
    let dir = tempfile::tempdir().expect("tmp");
    let config = dir.path().join("broken.yaml");
    std::fs::write(&config, "settings: {MODE: bad-metadata}\n").expect("write");
    let out = plugin_cli(
        "test",
        &[
            common::plugin_path("broken").as_ref(),
            "--config".as_ref(),
            config.as_ref(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("FAIL  metadata")
            && stdout.contains("provider name \"Broken_Provider\" is not a lower-case DNS label"),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
}
