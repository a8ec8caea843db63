//! End-to-end: the chart's alerts in a real Prometheus (Debian's package)
//! scraping the controller on the local control plane. Every rule loads and
//! evaluates; a NodePool filled to its limit and launches that keep failing
//! fire their alerts, and those about a missing leader or a failing plugin
//! stay quiet while neither happens. The rules come from `helm template`
//! with the PrometheusRule on, their `for` durations left out: the test
//! checks what the expressions see, not how long Prometheus waits.
//!
//! Needs a cluster (`KARPENTER_TEST_CLUSTER`) and `prometheus` on PATH
//! (`apt-get install prometheus`).

use crate::chart::helm;
use crate::common;

use common::cluster::*;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The chart's PrometheusRule groups as a Prometheus rule file, without
/// `for`.
fn rule_file(c: &Cluster) -> String {
    let chart = repo().join("charts/karpenter");
    let rendered = helm(
        c,
        &[
            "template",
            "t",
            chart.to_str().expect("path"),
            "--set",
            "prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ],
    );
    let spec = rendered
        .split_once("\nspec:\n")
        .expect("a PrometheusRule with a spec")
        .1;
    spec.lines()
        .filter(|l| !l.trim_start().starts_with("for: "))
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str, rules: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("rules.yaml"), rules).expect("rules");
        std::fs::write(
            dir.path().join("prometheus.yaml"),
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [rules.yaml]\n\
                 scrape_configs:\n  - job_name: karpenter\n    static_configs: [{{targets: ['{target}']}}]\n"
            ),
        )
        .expect("config");
        let port = free_port();
        let child = Command::new("prometheus")
            .current_dir(dir.path())
            .args([
                "--config.file=prometheus.yaml",
                "--storage.tsdb.path=data",
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.path().join("prometheus.log")).expect("log"),
            ))
            .spawn()
            .expect("prometheus on PATH (apt-get install prometheus)");
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let v: Value = reqwest::get(format!("{}{path}", self.url))
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(v.to_string())
        }
    }

    /// Every alerting rule as (name, state, health, the labels of its
    /// active alerts).
    async fn alerts(&self) -> Result<Vec<(String, String, String, Vec<Value>)>, String> {
        let data = self.get("/api/v1/rules?type=alert").await?;
        Ok(data["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                let labels = r["alerts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| a["labels"].clone())
                    .collect();
                (s("name"), s("state"), s("health"), labels)
            })
            .collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn the_charts_alerts_fire_in_a_real_prometheus() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    let (ns, full, failing) = (
        &format!("e2e-prom-{}", std::process::id()),
        &format!("full-{}", std::process::id()),
        &format!("failing-{}", std::process::id()),
    );
    let (ns, full, failing) = (ns.as_str(), full.as_str(), failing.as_str());
    namespace(&client, ns).await;
    apply(&c, node_class());
    // One 2-CPU type, a limit of 2 CPUs: one node fills it.
    let one_type = |zones: &[&str]| requirements_one_type("c-2x-amd64-linux", zones);
    let mut pool = node_pool(full, one_type(&["test-zone-a"]));
    pool["spec"]["limits"] = json!({"cpu": "2"});
    apply(&c, pool);
    // Every offering of this one is out of capacity.
    let zones = ["test-zone-b", "test-zone-c", "test-zone-d"];
    apply(&c, node_pool(failing, one_type(&zones)));
    let out_of_capacity: Vec<String> = zones
        .iter()
        .map(|z| format!("c-2x-amd64-linux/{z}/on-demand"))
        .collect();
    let controller = Controller::start(
        &c,
        &[("OUT_OF_CAPACITY", &out_of_capacity.join(","))],
        &["--disable-leader-election"],
    );
    let prometheus =
        Prometheus::start(&format!("127.0.0.1:{}", controller.metrics), &rule_file(&c));
    apply(&c, deployment(ns, "fills", full, 1, "1", false));
    apply(&c, deployment(ns, "fails", failing, 1, "1", false));

    let firing = wait_for_value(
        "the limit and launch alerts firing",
        Duration::from_secs(180),
        || async {
            let alerts = prometheus.alerts().await?;
            // "unknown" until the first evaluation.
            let broken: Vec<_> = alerts.iter().filter(|a| a.2 == "err").collect();
            if !broken.is_empty() {
                panic!("rules that do not evaluate: {broken:?}");
            }
            let fired = |name: &str, key: &str, value: &str| {
                alerts
                    .iter()
                    .any(|a| a.0 == name && a.1 == "firing" && a.3.iter().any(|l| l[key] == value))
            };
            if fired("KarpenterNodePoolLimitReached", "nodepool", full)
                && fired("KarpenterLaunchesFailing", "code", "InsufficientCapacity")
            {
                Ok(alerts)
            } else {
                Err(format!("{alerts:?}"))
            }
        },
    )
    .await;
    for (name, state, health, labels) in &firing {
        eprintln!("{name}: {state} {labels:?}");
        assert_eq!(health, "ok", "{name} evaluates");
    }
    for quiet in ["KarpenterNoLeader", "KarpenterPluginFailing"] {
        assert!(
            firing.iter().any(|a| a.0 == quiet && a.1 == "inactive"),
            "{quiet} is quiet while its cause is absent: {firing:?}"
        );
    }
    let limit = firing
        .iter()
        .find(|a| a.0 == "KarpenterNodePoolLimitReached")
        .expect("the limit alert");
    assert!(
        limit.3.iter().all(|l| l["nodepool"] == full),
        "only the full pool: {:?}",
        limit.3
    );

    drop(prometheus);
    clean_up(&client, ns, full).await;
    clean_up(&client, ns, failing).await;
    drop(controller);
}
