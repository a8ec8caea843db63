//! One table: per scenario, each figure for Karpenter and for us, and the
//! ratio ours / Karpenter's (below 1 is ours smaller: faster, fewer, lighter).
//! With several runs a figure is their median, its range beside it, and the
//! ratio is of the medians.

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
    /// Which run of the scenario with this controller, from 1.
    pub run: u32,
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
    pub fn new(s: Scenario, who: Contender, scale: f64, run: u32) -> Row {
        Row {
            scenario: s,
            controller: who,
            scale,
            run,
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

    pub fn failed(s: Scenario, who: Contender, scale: f64, run: u32, error: String) -> Row {
        Row {
            error: Some(error),
            ..Row::new(s, who, scale, run)
        }
    }
}

type Figure = (&'static str, fn(&Row) -> Option<f64>, usize);

const FIGURES: [Figure; 13] = [
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
    ("peak PSS (MB)", |r| Some(r.usage.peak_pss_mb), 1),
    ("P95 PSS (MB)", |r| Some(r.usage.p95_pss_mb), 1),
    ("CPU (s)", |r| Some(r.usage.cpu_seconds), 1),
    (
        "of which child processes (s)",
        |r| Some(r.usage.children_cpu_seconds),
        1,
    ),
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
        let runs = |who| -> Vec<&Row> {
            rows.iter()
                .filter(|r| r.scenario == s && r.controller == who)
                .collect()
        };
        let (k, o) = (runs(Contender::Karpenter), runs(Contender::Ours));
        let Some(any) = k.first().or(o.first()) else {
            continue;
        };
        let repeat = k.len().max(o.len());
        let of_runs = match repeat {
            1 => String::new(),
            n => format!("; median of {n} runs (lowest–highest)"),
        };
        let _ = writeln!(
            out,
            "\n## {} — {} (scale {}{of_runs})",
            s.name(),
            any.workload,
            any.scale
        );
        let _ = writeln!(out, "| figure | Karpenter | ours | ours/Karpenter |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for (name, get, digits) in FIGURES {
            let (kv, ov) = (Spread::of(&k, get), Spread::of(&o, get));
            if kv.is_none() && ov.is_none() {
                continue;
            }
            let cell =
                |v: &Option<Spread>| v.as_ref().map_or("—".to_string(), |v| v.cell(digits));
            let ratio = match (&kv, &ov) {
                (Some(k), Some(o)) if k.median > 0.0 => format!("{:.2}", o.median / k.median),
                (Some(k), Some(o)) if k.median == 0.0 && o.median == 0.0 => "=".into(),
                _ => "—".into(),
            };
            let _ = writeln!(out, "| {name} | {} | {} | {ratio} |", cell(&kv), cell(&ov));
        }
        for r in k.iter().chain(&o) {
            let who = match repeat {
                1 => r.controller.label().to_string(),
                _ => format!("{}, run {}", r.controller.label(), r.run),
            };
            if let Some(e) = &r.error {
                let _ = writeln!(out, "- {who} failed: {e}");
            }
            if !r.node_types.is_empty() {
                let types: Vec<String> = r
                    .node_types
                    .iter()
                    .map(|(t, n)| format!("{n}× {t}"))
                    .collect();
                let _ = writeln!(out, "- {who} nodes: {}", types.join(", "));
            }
            for note in &r.timings.notes {
                let _ = writeln!(out, "- {who}: {note}");
            }
        }
    }
    out
}

/// A figure over the runs that gave it: the median, and the range when
/// there was more than one.
struct Spread {
    median: f64,
    low: f64,
    high: f64,
    runs: usize,
}

impl Spread {
    fn of(rows: &[&Row], get: fn(&Row) -> Option<f64>) -> Option<Spread> {
        let mut values: Vec<f64> = rows
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| get(r))
            .collect();
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => values[n / 2],
            _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            low: values[0],
            high: values[n - 1],
            runs: n,
        })
    }

    fn cell(&self, digits: usize) -> String {
        match self.runs {
            1 => format!("{:.digits$}", self.median),
            _ => format!(
                "{:.digits$} ({:.digits$}–{:.digits$})",
                self.median, self.low, self.high
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priced(run: u32, price: f64) -> Row {
        Row {
            price_per_hour: price,
            ..Row::new(Scenario::Consolidation, Contender::Ours, 0.25, run)
        }
    }

    #[test]
    fn repeated_runs_give_the_median_and_the_range_and_leave_failures_out() {
        let rows = [priced(1, 15.05), priced(2, 13.02), priced(3, 13.36)];
        let refs: Vec<&Row> = rows.iter().collect();
        let spread = Spread::of(&refs, |r| Some(r.price_per_hour)).expect("three runs");
        assert_eq!(spread.cell(2), "13.36 (13.02–15.05)");
        let failed = Row {
            error: Some("timed out".into()),
            ..priced(4, 99.0)
        };
        let refs = [&rows[0], &rows[1], &failed];
        let spread = Spread::of(&refs, |r| Some(r.price_per_hour)).expect("two runs");
        assert_eq!(
            spread.cell(2),
            "14.04 (13.02–15.05)",
            "an even count halves the middle two"
        );
        let one = Spread::of(&[&rows[0]], |r| Some(r.price_per_hour)).expect("one run");
        assert_eq!(one.cell(2), "15.05", "one run, no range");
    }
}
