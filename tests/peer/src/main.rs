//! Side by side with upstream Karpenter. Each scenario runs on a fresh local
//! control plane per controller: Karpenter's KWOK controller with its CRDs,
//! then ours with ours, the same NodePools, catalog and workload, both
//! measured from outside (the API server's audit log, its objects, /proc).
//!
//! Run it with `tests/peer/run`, which builds what it needs first.

mod audit;
mod catalog;
mod cluster;
mod contender;
mod report;
mod sampler;
mod scenario;
mod workload;

use anyhow::{Context, Result};
use clap::Parser;
use contender::{Builds, Contender};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use report::Row;
use scenario::Scenario;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    about = "Run scenarios with upstream Karpenter and with ours, and print both side by side"
)]
struct Args {
    /// Scenarios to run (repeatable); all six when none is given.
    #[arg(long = "scenario", value_enum)]
    scenarios: Vec<Scenario>,
    /// Run one controller only.
    #[arg(long, value_enum)]
    only: Option<Contender>,
    /// Multiplies every scenario's pod counts (1 = the counts of Karpenter's
    /// performance suite).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Upper bound of each wait (all pods Running; stable).
    #[arg(long, default_value = "15", value_name = "MINUTES")]
    timeout_minutes: u64,
    /// Karpenter's build directory (tests/peer/build prints it).
    #[arg(long)]
    karpenter_dir: PathBuf,
    /// Our `karpenter` binary.
    #[arg(long)]
    ours: PathBuf,
    /// Where controller logs and audit logs are kept.
    #[arg(long, default_value = "target/peer")]
    out_dir: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    output: report::Format,
    /// Leave each cluster running after its run.
    #[arg(long)]
    keep: bool,
    /// Runs of each scenario per controller, taken in turn (Karpenter, ours,
    /// Karpenter, ...); the table gives each figure's median and range.
    /// Where nodes end up depends on where kube-scheduler put the pods, so
    /// one run's end state is one draw.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let builds = Builds {
        karpenter_dir: args.karpenter_dir.clone(),
        ours: args.ours.clone(),
    };
    let prices = catalog::Prices::load(&builds.catalog())?;
    let scenarios = if args.scenarios.is_empty() {
        scenario::ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    let contenders: Vec<Contender> = match args.only {
        Some(c) => vec![c],
        None => vec![Contender::Karpenter, Contender::Ours],
    };
    let mut rows = Vec::new();
    for s in &scenarios {
        for run in 1..=args.repeat {
            for who in &contenders {
                eprintln!(
                    "[peer] {} with {} ({}), run {run} of {}",
                    s.name(),
                    who.label(),
                    s.describe(args.scale),
                    args.repeat
                );
                let row = run_one(*s, *who, run, &args, &builds, &prices).await;
                let row = row
                    .unwrap_or_else(|e| Row::failed(*s, *who, args.scale, run, format!("{e:#}")));
                eprintln!("[peer] {}", serde_json::to_string(&row)?);
                rows.push(row);
            }
        }
    }
    report::print(&rows, args.output, &builds.karpenter_dir, &builds.ours)?;
    Ok(())
}

async fn run_one(
    s: Scenario,
    who: Contender,
    run: u32,
    args: &Args,
    builds: &Builds,
    prices: &catalog::Prices,
) -> Result<Row> {
    // One run keeps the plain name; repeated runs are numbered, so each
    // keeps its logs (and, with --keep, its cluster).
    let name = match args.repeat {
        1 => format!("{}-{}", s.name(), who.label()),
        _ => format!("{}-{}-{run}", s.name(), who.label()),
    };
    let dir = std::path::absolute(args.out_dir.join(&name))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let cluster = cluster::Cluster::up(&format!("peer-{name}"), &dir, args.keep).await?;
    contender::install_crds(who, &cluster, builds)?;
    let (kubeconfig, token) = cluster.controller_identity(&dir).await?;
    prepare(&cluster).await?;
    let mut controller = contender::start(who, &cluster, builds, &kubeconfig, &token, &dir)?;
    let outcome = {
        let mut ctx = scenario::Ctx {
            cluster: &cluster,
            controller: &mut controller,
            timeout: Duration::from_secs(args.timeout_minutes * 60),
            scale: args.scale,
        };
        scenario::run(s, &mut ctx).await
    };
    let usage = controller.stop();
    let requests = audit::read(&cluster.audit_log())?;
    std::fs::copy(cluster.audit_log(), dir.join("audit.log")).ok();
    let nodes = scenario::karpenter_nodes(&cluster.client).await?;
    let mut price = 0.0;
    let mut unpriced = 0;
    let mut types = std::collections::BTreeMap::new();
    for n in &nodes {
        let l = n.metadata.labels.clone().unwrap_or_default();
        let get = |k: &str| l.get(k).map(String::as_str).unwrap_or("");
        *types
            .entry(get("node.kubernetes.io/instance-type").to_string())
            .or_insert(0u32) += 1;
        match prices.of(
            get("node.kubernetes.io/instance-type"),
            get("topology.kubernetes.io/zone"),
            get("karpenter.sh/capacity-type"),
        ) {
            Some(p) => price += p,
            None => unpriced += 1,
        }
    }
    let mut row = Row::new(s, who, args.scale, run);
    match outcome {
        Ok(t) => row.timings = t,
        Err(e) => row.error = Some(format!("{e:#}")),
    }
    if unpriced > 0 {
        row.timings
            .notes
            .push(format!("{unpriced} nodes not in the catalog"));
    }
    row.nodes_end = nodes.len() as u32;
    row.node_types = types;
    row.price_per_hour = price;
    row.usage = usage;
    row.requests = requests;
    Ok(row)
}

/// The namespace and the KWOKNodeClass, Ready.
async fn prepare(cluster: &cluster::Cluster) -> Result<()> {
    let ns: Api<Namespace> = Api::all(cluster.client.clone());
    let namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": workload::NAMESPACE}}))?;
    ns.create(&PostParams::default(), &namespace)
        .await
        .context("namespace")?;
    cluster.apply(&workload::node_class().to_string())?;
    let gvk = GroupVersionKind::gvk("karpenter.kwok.sh", "v1alpha1", "KWOKNodeClass");
    let api: Api<DynamicObject> =
        Api::all_with(cluster.client.clone(), &ApiResource::from_gvk(&gvk));
    api.patch_status(
        "default",
        &PatchParams::default(),
        &Patch::Merge(workload::node_class_ready_status()),
    )
    .await
    .context("NodeClass status")?;
    Ok(())
}
