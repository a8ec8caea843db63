//! `karpenter simulate [PATH]`: what the provisioner would launch for these
//! manifests, and why any pod would stay pending.

use super::{Output, files, print, providers};
use crate::simulate::{self, Simulation, manifests::Manifests};
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
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

pub async fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let manifests = read_manifests(args.path.as_deref())?;
    let registry = providers::open(args.plugins_dir.as_deref()).await?;
    let sim = simulate::run(&manifests, &registry).await?;
    match args.output {
        Output::Json => print(&serde_json::to_string_pretty(&sim.plan)?),
        Output::Table => print(&table(&sim)),
    }
    Ok(if sim.plan.unschedulable.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
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

fn table(sim: &Simulation) -> String {
    let plan = &sim.plan;
    let mut out = String::new();
    let rows: Vec<[String; 7]> = plan
        .new_node_claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cheapest = c.cheapest.as_ref();
            [
                format!("{}-{}", c.node_pool, i + 1),
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
                    .map(|o| format!("{:.4}", o.price))
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
    let mut widths = header.map(str::len);
    for row in &rows {
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
    let _ = writeln!(out, "{}", line(&header.map(String::from)));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row));
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
    for u in &plan.unschedulable {
        let _ = writeln!(
            out,
            "pending {}/{}: {}",
            u.pod.namespace, u.pod.name, u.reason
        );
    }
    out.trim_end().to_string()
}
