//! `karpenter simulate [PATH]`: what the provisioner would launch for these
//! manifests, and why any pod would stay pending; with `--cluster`, on top
//! of the live cluster; with `--disruption`, what disruption would then
//! remove and replace.

use super::{Output, files, print, providers};
use crate::simulate::{self, Simulation, manifests::Manifests, state::State};
use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::Args;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The bundled example: the guide's inflate deployment (5 pods of one CPU)
/// against the general-purpose NodePool, on the kwok provider.
const EXAMPLE: [(&str, &str); 3] = [
    (
        "examples/kwok/nodeclass.yaml",
        include_str!("../../../examples/kwok/nodeclass.yaml"),
    ),
    (
        "examples/kwok/nodepool.yaml",
        include_str!("../../../examples/kwok/nodepool.yaml"),
    ),
    (
        "examples/kwok/inflate.yaml",
        include_str!("../../../examples/kwok/inflate.yaml"),
    ),
];

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A YAML file or a directory of them; the bundled example when omitted.
    pub path: Option<PathBuf>,
    /// A directory of provider plugins (`<name>.wasm`, as the controller
    /// loads them); the providers built into this binary when omitted.
    #[arg(long, visible_alias = "plugin-dir")]
    pub plugins_dir: Option<PathBuf>,
    /// Start from the live cluster (KUBECONFIG) and apply PATH on top of
    /// it; only reads the cluster.
    #[arg(long)]
    pub cluster: bool,
    /// Manifests to delete first, as `kubectl delete -f` would (repeatable).
    #[arg(long, value_name = "PATH")]
    pub delete: Vec<PathBuf>,
    /// Also decide disruption on the result, until nothing more would change.
    #[arg(long)]
    pub disruption: bool,
    /// Decide at this offset from now (a Go duration such as 2h or 90m, with
    /// an optional leading +): expiry and budget schedules are read then.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub at: Option<String>,
    /// Karpenter's feature gates, as the controller takes them
    /// (NodeOverlay=true lays the NodeOverlays over the catalogs).
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Exit status when the cluster would change (`--cluster`, `--disruption`).
const CHANGES: u8 = 3;
/// Exit status when pods would stay pending.
const PENDING: u8 = 2;

pub async fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let what_if = args.cluster || args.disruption;
    let now = jiff::Timestamp::now();
    let offset = match &args.at {
        Some(at) => vocabulary::duration::parse(at.trim_start_matches('+'))
            .with_context(|| format!("--at {at}: not a duration such as 2h or 90m"))?,
        None => std::time::Duration::ZERO,
    };
    let registry = providers::open(args.plugins_dir.as_deref()).await?;
    let mut state = if args.cluster {
        let client = kube::Client::try_default()
            .await
            .context("--cluster: no cluster (set KUBECONFIG)")?;
        simulate::live::read(client, registry.clone()).await?
    } else {
        State::default()
    };
    let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now);
    let mut notes = Vec::new();
    for path in &args.delete {
        notes.extend(state.delete(&read_manifests(Some(path))?, time.clone()));
    }
    if args.path.is_some() || !args.cluster {
        notes.extend(state.apply(&read_manifests(args.path.as_deref())?, time)?);
    }
    let options = simulate::Options {
        disruption: args.disruption,
        now: now.as_second() + offset.as_secs() as i64,
        as_controller: args.cluster,
        node_overlay: super::controller::feature_gates(&args.feature_gates)?
            .get("NodeOverlay")
            .copied()
            .unwrap_or(false),
    };
    let sim = simulate::run(&state, &registry, options).await?;
    notes.extend(
        sim.skipped
            .iter()
            .map(|why| format!("left out, as the controller would: {why}")),
    );
    match (args.output, what_if) {
        (Output::Json, false) => print(&serde_json::to_string_pretty(&sim.plan)?),
        (Output::Json, true) => print(&serde_json::to_string_pretty(&serde_json::json!({
            "applied": notes,
            "simulation": sim,
        }))?),
        (Output::Table, false) => print(&table(&sim)),
        (Output::Table, true) => print(&format!(
            "{}\n\n{}\n\n{}",
            notes.join("\n"),
            table(&sim),
            changes(&sim)
        )),
    }
    Ok(if what_if && sim.diff.changes() {
        ExitCode::from(CHANGES)
    } else if sim.plan.unschedulable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(PENDING)
    })
}

fn read_manifests(path: Option<&Path>) -> anyhow::Result<Manifests> {
    let mut manifests = Manifests::default();
    let Some(path) = path else {
        for (name, text) in EXAMPLE {
            manifests.add_yaml(name, text)?;
        }
        return Ok(manifests);
    };
    if path.is_dir() {
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .with_context(|| format!("opening {}", path.display()))?;
        let mut names: Vec<String> = dir
            .entries()?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
            .collect();
        names.sort();
        for name in names {
            let text = dir
                .read_to_string(&name)
                .with_context(|| format!("reading {name}"))?;
            manifests.add_yaml(&format!("{}/{name}", path.display()), &text)?;
        }
    } else {
        manifests.add_yaml(&path.display().to_string(), &files::read_to_string(path)?)?;
    }
    Ok(manifests)
}

/// What would change: each disruption step, why the other nodes stay, and
/// the nodes and cost per NodePool before and after.
fn changes(sim: &Simulation) -> String {
    let mut out = String::new();
    let d = &sim.diff;
    if let Some(settled) = &sim.disruption {
        if settled.steps.is_empty() {
            let _ = writeln!(out, "Disruption: nothing would be removed or replaced.");
        }
        for (i, s) in settled.steps.iter().enumerate() {
            let _ = write!(
                out,
                "Disruption {}: {} ({}) removes {}",
                i + 1,
                s.method,
                s.reason,
                s.removed.join(", ")
            );
            if !s.launched.is_empty() {
                let _ = write!(out, ", launches {}", s.launched.join(", "));
            }
            if s.savings > 0.0 {
                let _ = write!(out, ", saving ${:.4}/h", s.savings);
            }
            out.push('\n');
        }
        if settled.cut_short {
            let _ = writeln!(out, "(stopped after {} steps)", settled.steps.len());
        }
        for k in &settled.kept {
            if let Some(r) = k.reasons.first() {
                let _ = writeln!(out, "kept {} ({}): {}", k.name, k.node_pool, r.message);
            }
        }
        out.push('\n');
    }
    for (sign, nodes) in [("+", &d.added), ("-", &d.removed)] {
        for n in nodes {
            let _ = writeln!(
                out,
                "{sign} {}   {}   {}   {}   {}   {}   {} pods",
                n.name,
                n.node_pool.as_deref().unwrap_or("(unmanaged)"),
                n.instance_type.as_deref().unwrap_or("-"),
                n.zone.as_deref().unwrap_or("-"),
                n.capacity_type.as_deref().unwrap_or("-"),
                n.price
                    .map(|p| format!("${p:.4}/h"))
                    .unwrap_or_else(|| "-".into()),
                n.pods
            );
        }
    }
    let header = [
        "NODEPOOL",
        "NODES",
        "$/H BEFORE",
        "$/H AFTER",
        "$/MONTH AFTER",
    ];
    let rows: Vec<[String; 5]> = d
        .pools
        .iter()
        .map(|p| {
            [
                p.node_pool.clone().unwrap_or_else(|| "(unmanaged)".into()),
                format!("{} -> {}", p.nodes_before, p.nodes_after),
                format!("{:.4}", p.price_before),
                format!("{:.4}", p.price_after),
                format!("{:.2}", p.price_after * HOURS_PER_MONTH),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&columns(&header, &rows));
    let _ = write!(
        out,
        "\n\n{} nodes added, {} removed; {} pods placed, {} moved, {} pending. ${:.4}/h -> ${:.4}/h (${:.2} -> ${:.2} a month).",
        d.added.len(),
        d.removed.len(),
        d.pods_placed,
        d.pods_moved,
        d.pods_pending_after,
        d.price_before,
        d.price_after,
        d.price_before * HOURS_PER_MONTH,
        d.price_after * HOURS_PER_MONTH,
    );
    out
}

/// A month as cloud price sheets count it.
const HOURS_PER_MONTH: f64 = 730.0;

fn columns<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("   ")
            .trim_end()
            .to_string()
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(&header.map(String::from)));
    for row in rows {
        let _ = writeln!(out, "{}", line(row));
    }
    out.trim_end().to_string()
}

fn table(sim: &Simulation) -> String {
    let plan = &sim.plan;
    let mut out = String::new();
    let mut names = sim.launched.iter();
    let rows: Vec<[String; 7]> = plan
        .new_node_claims
        .iter()
        .map(|c| {
            let cheapest = c.cheapest.as_ref();
            [
                cheapest
                    .and_then(|_| names.next().cloned())
                    .unwrap_or_else(|| "-".into()),
                c.node_pool.clone(),
                cheapest
                    .map(|o| o.instance_type.clone())
                    .unwrap_or_else(|| "-".into()),
                cheapest
                    .and_then(|o| o.zone.clone())
                    .unwrap_or_else(|| "-".into()),
                cheapest
                    .map(|o| o.capacity_type.clone())
                    .unwrap_or_else(|| "-".into()),
                cheapest
                    .map(|o| match &o.price_overlay {
                        Some(overlay) => format!("{:.4} (nodeoverlay {overlay})", o.price),
                        None => format!("{:.4}", o.price),
                    })
                    .unwrap_or_else(|| "-".into()),
                c.pods.len().to_string(),
            ]
        })
        .collect();
    let header = [
        "NODECLAIM",
        "NODEPOOL",
        "TYPE",
        "ZONE",
        "CAPACITY",
        "$/H",
        "PODS",
    ];
    if rows.is_empty() {
        out.push_str("No new NodeClaim.\n");
    } else {
        out.push_str(&columns(&header, &rows));
        out.push('\n');
    }
    let on_existing = plan
        .placements
        .iter()
        .filter(|p| matches!(p.target, engine::Target::ExistingNode(_)))
        .count();
    let _ = writeln!(
        out,
        "\n{} pods: {} on new NodeClaims, {} on existing nodes, {} pending. Total ${:.4}/h.",
        sim.pod_count,
        plan.placements.len() - on_existing,
        on_existing,
        plan.unschedulable.len(),
        plan.total_price_per_hour()
    );
    for note in &sim.overlays {
        let _ = writeln!(out, "{note}");
    }
    for u in &plan.unschedulable {
        let _ = writeln!(
            out,
            "pending {}/{}: {}",
            u.pod.namespace, u.pod.name, u.reason
        );
    }
    out.trim_end().to_string()
}
