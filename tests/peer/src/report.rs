//! One table: per scenario, each figure for Karpenter and for us, and the
//! ratio ours / Karpenter's (below 1 is ours smaller: faster, fewer, lighter).

use crate::audit::Requests;
use crate::contender::Contender;
use crate::sampler::Usage;
use crate::scenario::{Scenario, Timings};
use anyhow::Result;
use std::fmt::Write;
use std::path::Path;

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub scenario: Scenario,
    pub controller: Contender,
    pub scale: f64,
    pub workload: String,
    pub timings: Timings,
    pub nodes_end: u32,
    /// Instance type → nodes of it at the end.
    pub node_types: std::collections::BTreeMap<String, u32>,
    pub price_per_hour: f64,
    pub usage: Usage,
    pub requests: Requests,
    pub error: Option<String>,
}

impl Row {
    pub fn new(s: Scenario, who: Contender, scale: f64) -> Row {
        Row {
            scenario: s,
            controller: who,
            scale,
            workload: s.describe(scale),
            timings: Timings::default(),
            nodes_end: 0,
            node_types: Default::default(),
            price_per_hour: 0.0,
            usage: Usage::default(),
            requests: Requests::default(),
            error: None,
        }
    }

    pub fn failed(s: Scenario, who: Contender, scale: f64, error: String) -> Row {
        Row {
            error: Some(error),
            ..Row::new(s, who, scale)
        }
    }
}

type Figure = (&'static str, fn(&Row) -> Option<f64>, usize);

const FIGURES: [Figure; 10] = [
    ("time to all pods Running (s)", |r| r.timings.running_s, 1),
    ("time to stable (s)", |r| r.timings.stable_s, 1),
    (
        "NodeClaims created",
        |r| Some(r.requests.nodeclaims_created as f64),
        0,
    ),
    ("nodes at the end", |r| Some(r.nodes_end as f64), 0),
    ("$/h at the end", |r| Some(r.price_per_hour), 2),
    ("peak RSS (MB)", |r| Some(r.usage.peak_rss_mb), 1),
    ("P95 RSS (MB)", |r| Some(r.usage.p95_rss_mb), 1),
    ("CPU (s)", |r| Some(r.usage.cpu_seconds), 1),
    ("API requests", |r| Some(r.requests.total as f64), 0),
    ("pods evicted", |r| Some(r.requests.pods_evicted as f64), 0),
];

pub fn print(rows: &[Row], format: Format, karpenter_dir: &Path, ours: &Path) -> Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(rows)?),
        Format::Text => print!("{}", text(rows, karpenter_dir, ours)),
    }
    Ok(())
}

fn text(rows: &[Row], karpenter_dir: &Path, ours: &Path) -> String {
    let mut out = String::new();
    fn name(p: Option<&Path>) -> &str {
        p.and_then(|p| p.file_name()?.to_str()).unwrap_or("?")
    }
    // Cargo puts each profile's binary in a directory named after it.
    let _ = writeln!(out, "Ours: the `{}` build", name(ours.parent()));
    let _ = writeln!(
        out,
        "Karpenter: {} (KWOK provider, built from its Go module)",
        name(Some(karpenter_dir))
    );
    let mut scenarios: Vec<Scenario> = Vec::new();
    for r in rows {
        if !scenarios.contains(&r.scenario) {
            scenarios.push(r.scenario);
        }
    }
    for s in scenarios {
        let find = |who| rows.iter().find(|r| r.scenario == s && r.controller == who);
        let (k, o) = (find(Contender::Karpenter), find(Contender::Ours));
        let any = k.or(o).expect("a row of this scenario");
        let _ = writeln!(
            out,
            "\n## {} — {} (scale {})",
            s.name(),
            any.workload,
            any.scale
        );
        let _ = writeln!(out, "| figure | Karpenter | ours | ours/Karpenter |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for (name, get, digits) in FIGURES {
            let kv = k.filter(|r| r.error.is_none()).and_then(get);
            let ov = o.filter(|r| r.error.is_none()).and_then(get);
            if kv.is_none() && ov.is_none() {
                continue;
            }
            let cell = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.digits$}"));
            let ratio = match (kv, ov) {
                (Some(k), Some(o)) if k > 0.0 => format!("{:.2}", o / k),
                (Some(k), Some(o)) if k == 0.0 && o == 0.0 => "=".into(),
                _ => "—".into(),
            };
            let _ = writeln!(out, "| {name} | {} | {} | {ratio} |", cell(kv), cell(ov));
        }
        for r in [k, o].into_iter().flatten() {
            if let Some(e) = &r.error {
                let _ = writeln!(out, "- {} failed: {e}", r.controller.label());
            }
            if !r.node_types.is_empty() {
                let types: Vec<String> = r
                    .node_types
                    .iter()
                    .map(|(t, n)| format!("{n}× {t}"))
                    .collect();
                let _ = writeln!(
                    out,
                    "- {} nodes: {}",
                    r.controller.label(),
                    types.join(", ")
                );
            }
            for note in &r.timings.notes {
                let _ = writeln!(out, "- {}: {note}", r.controller.label());
            }
        }
    }
    out
}
