//! End-to-end: the chart's alerts and dashboards in a real Prometheus
//! (Debian's package) scraping the controller on the local control plane.
//! The controller first waits behind a lease another holder keeps (no
//! leader fires), then leads; a NodePool filled to its limit, launches that
//! keep failing and a plugin that panics fire their alerts. The fleet then
//! drifts and consolidates, and every query of every dashboard returns
//! series carrying the labels its legend shows. Rules and dashboards come
//! from `helm template`; the rules lose their `for` durations: the test
//! checks what the expressions see, not how long Prometheus waits.
//!
//! Needs a cluster (`KARPENTER_TEST_CLUSTER`) and `prometheus` on PATH
//! (`apt-get install prometheus`).

use crate::chart::helm;
use crate::common;

use common::cluster::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One template of the chart, rendered with `setting`.
fn chart_part(c: &Cluster, setting: &str, template: &str) -> String {
    let chart = repo().join("charts/karpenter");
    helm(
        c,
        &[
            "template",
            "t",
            chart.to_str().expect("path"),
            "--set",
            setting,
            "--show-only",
            template,
        ],
    )
}

/// The chart's PrometheusRule groups as a Prometheus rule file, without
/// `for`.
fn rule_file(c: &Cluster) -> String {
    let rendered = chart_part(
        c,
        "prometheusRule.enabled=true",
        "templates/prometheusrule.yaml",
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

impl Prometheus {
    /// The series an instant query returns.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            &[("query", expr)],
        )
        .map_err(|e| e.to_string())?;
        let v: Value = reqwest::get(url)
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{expr}: {v}"));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

/// One query of a dashboard panel: (dashboard, panel title, expr, legend).
type PanelQuery = (String, String, String, String);

/// Every query of every dashboard the chart ships, as Grafana would send
/// it over a range of a minute with every NodePool chosen. The fallbacks
/// that draw a zero where no errors happened are cut off, so an error
/// panel must find the errors this test causes; the one that lists
/// NodeClaims waiting to register keeps its own, as none waits here.
fn dashboard_queries(c: &Cluster) -> Vec<PanelQuery> {
    let rendered = chart_part(c, "dashboards.enabled=true", "templates/dashboards.yaml");
    let mut out = Vec::new();
    for doc in serde_saphyr::from_multiple::<Value>(&rendered).expect("ConfigMaps") {
        for (key, json) in doc["data"].as_object().expect("data") {
            let dashboard: Value = serde_json::from_str(json.as_str().expect("text"))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            for panel in dashboard["panels"].as_array().expect("panels") {
                for target in panel["targets"].as_array().into_iter().flatten() {
                    let expr = target["expr"]
                        .as_str()
                        .expect("expr")
                        .replace("$__rate_interval", "1m")
                        .replace("$nodepool", ".*");
                    let expr = expr
                        .strip_suffix(" or on () vector(0)")
                        .unwrap_or(&expr)
                        .to_string();
                    out.push((
                        key.clone(),
                        panel["title"].as_str().unwrap_or_default().to_string(),
                        expr,
                        target["legendFormat"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    ));
                }
            }
        }
    }
    out
}

/// The labels a legend names: `{{nodepool}} {{reason}}`.
fn legend_labels(legend: &str) -> Vec<&str> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}"))
        .map(|(l, _)| l.trim())
        .collect()
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
#[ignore = "needs a cluster: KARPENTER_TEST_CLUSTER"]
async fn the_charts_alerts_and_dashboards_work_in_a_real_prometheus() {
    let _serial = SERIAL.lock().await;
    let c = cluster();
    let client = client(&c).await;
    install_crds(&c);
    install_plugin_crds(&c, "misbehave", &["misbehavenodeclasses.test.karpenter.sh"]);
    let id = std::process::id();
    let (ns, full, failing, churn, broken, lease) = (
        &format!("e2e-prom-{id}"),
        &format!("full-{id}"),
        &format!("failing-{id}"),
        &format!("churn-{id}"),
        &format!("broken-{id}"),
        &format!("prom-{id}"),
    );
    let (ns, full, failing, churn, broken, lease) = (
        ns.as_str(),
        full.as_str(),
        failing.as_str(),
        churn.as_str(),
        broken.as_str(),
        lease.as_str(),
    );
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
    // Nodes that drift and empty out.
    let mut pool = node_pool(churn, one_type(&["test-zone-a"]));
    pool["spec"]["disruption"] =
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    apply(&c, pool);
    // A NodeClass of a plugin that panics when it validates one.
    apply(
        &c,
        json!({"apiVersion": "test.karpenter.sh/v1", "kind": "MisbehaveNodeClass",
               "metadata": {"name": broken}}),
    );
    let mut pool = node_pool(broken, json!([]));
    pool["spec"]["template"]["spec"]["nodeClassRef"] =
        json!({"group": "test.karpenter.sh", "kind": "MisbehaveNodeClass", "name": broken});
    apply(&c, pool);

    // Another holder keeps the lease the controller waits for.
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-system");
    apply(
        &c,
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": lease, "namespace": "kube-system"},
               "spec": {"holderIdentity": "another-replica", "leaseDurationSeconds": 3600,
                        "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}}),
    );
    let misbehave = PluginSetup {
        name: "misbehave".into(),
        wasm: common::plugin_wasm("misbehave"),
        config: json!({"settings": {"MODE": "panic-validate"}}),
        secrets: vec![],
    };
    let controller = Controller::start_plugins(
        &c,
        &[
            PluginSetup::kwok(&c, &[("OUT_OF_CAPACITY", &out_of_capacity.join(","))]),
            misbehave,
        ],
        &[
            "--leader-election-name",
            lease,
            "--disruption-interval",
            "2s",
        ],
    );
    let prometheus =
        Prometheus::start(&format!("127.0.0.1:{}", controller.metrics), &rule_file(&c));
    let state = |alerts: &[(String, String, String, Vec<Value>)], name: &str| {
        alerts
            .iter()
            .find(|a| a.0 == name)
            .map(|a| a.1.clone())
            .unwrap_or_default()
    };
    wait_for("no leader firing", Duration::from_secs(60), || async {
        let alerts = prometheus.alerts().await?;
        if state(&alerts, "KarpenterNoLeader") == "firing" {
            Ok(())
        } else {
            Err(format!("{alerts:?}"))
        }
    })
    .await;
    leases
        .delete(lease, &DeleteParams::default())
        .await
        .expect("lease deleted");

    apply(&c, deployment(ns, "fills", full, 1, "1", false));
    apply(&c, deployment(ns, "fails", failing, 1, "1", false));
    apply(&c, deployment(ns, "churn", churn, 3, "1", true));
    let firing = wait_for_value(
        "the limit, launch and plugin alerts firing, the leader one quiet",
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
                && fired("KarpenterPluginFailing", "plugin", "misbehave")
                && state(&alerts, "KarpenterNoLeader") == "inactive"
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
    assert_eq!(
        state(&firing, "KarpenterNodeClaimNotRegistered"),
        "inactive",
        "every NodeClaim registers here"
    );
    let limit = firing
        .iter()
        .find(|a| a.0 == "KarpenterNodePoolLimitReached")
        .expect("the limit alert");
    assert!(
        limit.3.iter().all(|l| l["nodepool"] == full),
        "only the full pool: {:?}",
        limit.3
    );

    // Drift replaces the churn nodes (evicting their pods), then they empty
    // out and consolidation removes them.
    wait_for("3 churn pods running", Duration::from_secs(120), || {
        pods_running(&client, ns, "churn", 3)
    })
    .await;
    Api::<karpenter_controller::crds::NodePool>::all(client.clone())
        .patch(
            churn,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})),
        )
        .await
        .expect("drift the churn pool");
    wait_for(
        "evictions and drift decisions",
        Duration::from_secs(180),
        || async {
            let evicted = prometheus
                .query("sum(karpenter_nodes_eviction_requests_total{code=\"200\"}) > 0")
                .await?;
            let drifted = prometheus
                .query(
                    "sum(karpenter_voluntary_disruption_decisions_total{reason=\"Drifted\"}) > 0",
                )
                .await?;
            if !evicted.is_empty() && !drifted.is_empty() {
                Ok(())
            } else {
                Err(format!("evicted {evicted:?}, drifted {drifted:?}"))
            }
        },
    )
    .await;
    scale(&client, ns, "churn", 0).await;
    wait_for(
        "empty nodes consolidated",
        Duration::from_secs(120),
        || async {
            let empty = prometheus
                .query("sum(karpenter_voluntary_disruption_decisions_total{reason=\"Empty\"}) > 0")
                .await?;
            if empty.is_empty() {
                Err("no Empty decision yet".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;

    let queries = dashboard_queries(&c);
    assert!(queries.len() >= 30, "{} queries", queries.len());
    for (dashboard, title, expr, legend) in &queries {
        // A label may be empty on some series (a drift decision has no
        // consolidation type), but not on all: then the legend names a label
        // the query does not keep. A counter born a moment ago needs a
        // second sample before rate() sees it, hence the wait.
        wait_for(
            &format!("{dashboard} / {title}: {expr} with the labels of its legend {legend:?}"),
            Duration::from_secs(30),
            || async {
                let series = prometheus.query(expr).await?;
                let missing: Vec<&str> = legend_labels(legend)
                    .into_iter()
                    .filter(|label| {
                        !series
                            .iter()
                            .any(|s| s["metric"][*label].as_str().is_some_and(|v| !v.is_empty()))
                    })
                    .collect();
                if series.is_empty() || !missing.is_empty() {
                    Err(format!("missing {missing:?} in {series:?}"))
                } else {
                    Ok(())
                }
            },
        )
        .await;
    }
    eprintln!("{} dashboard queries each returned series", queries.len());

    drop(prometheus);
    for pool in [full, failing, churn, broken] {
        clean_up(&client, ns, pool).await;
    }
    drop(controller);
    let _ = leases.delete(lease, &DeleteParams::default()).await;
}
