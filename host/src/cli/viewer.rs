//! `karpenter viewer`: one line per node, grouped by NodePool, with its
//! requested CPU and memory against allocatable and its price, under a
//! header of totals and pending pods; redrawn every `--interval`, or once
//! with `--once` for scripts.

use crate::viewer::frame::{self, Options, Pending, Sort};
use clap::Args;
use karpenter_controller::crds::nodeclaim::conditions::DISRUPTION_REASON;
use karpenter_controller::{Ctx, disruption, provisioner};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct ViewerArgs {
    /// Print one frame as plain text and exit.
    #[arg(long)]
    pub once: bool,
    /// Only this NodePool's nodes.
    #[arg(long)]
    pub nodepool: Option<String>,
    /// Only nodes with these labels: `key=value,key2` (a bare key: any value).
    #[arg(short = 'l', long, default_value = "")]
    pub selector: String,
    #[arg(long, value_enum, default_value = "name")]
    pub sort: Sort,
    /// List nodes Karpenter does not manage too.
    #[arg(long)]
    pub unmanaged: bool,
    /// Time between frames.
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub interval: Duration,
    /// The controller's plugins, whose catalogs give the prices; the
    /// providers built into this binary when omitted.
    #[arg(long, env = "PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
}

/// A Go duration (`2s`, `500ms`), as Karpenter's flags take them.
fn go_duration(s: &str) -> Result<Duration, String> {
    vocabulary::duration::parse(s).map_err(|e| e.to_string())
}

pub async fn run(args: ViewerArgs) -> anyhow::Result<ExitCode> {
    let ctx = super::explain::context(args.plugin_dir.as_deref(), &args.feature_gates).await?;
    let options = Options {
        node_pool: args.nodepool.clone(),
        selector: frame::parse_selector(&args.selector),
        sort: args.sort,
        unmanaged: args.unmanaged,
    };
    let mut observer = disruption::Observer::default();
    if args.once {
        let text = draw(&ctx, &mut observer, &options).await?;
        super::print(text.trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    let mut last = String::new();
    loop {
        let status = match draw(&ctx, &mut observer, &options).await {
            Ok(text) => {
                last = text;
                format!(
                    "updated {}  (every {:?}; Ctrl-C quits)",
                    jiff::Timestamp::now().strftime("%H:%M:%S"),
                    args.interval
                )
            }
            Err(e) => format!("cannot read the cluster, showing the last frame: {e:#}"),
        };
        let mut out = std::io::stdout().lock();
        // Clear the screen and home the cursor, then the frame.
        let drawn = write!(out, "\x1b[2J\x1b[H{last}\n{status}\n").and_then(|_| out.flush());
        drop(out);
        if drawn.is_err() {
            // The terminal went away.
            return Ok(ExitCode::SUCCESS);
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(args.interval) => {}
        }
    }
}

async fn draw(
    ctx: &Ctx,
    observer: &mut disruption::Observer,
    options: &Options,
) -> anyhow::Result<String> {
    let snap = disruption::snapshot(ctx, observer).await;
    let decision = provisioner::decide(ctx).await?;
    let pending = match &decision {
        None => Pending::default(),
        Some(d) => {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for u in &d.plan.unschedulable {
                *reasons.entry(u.reason.as_str()).or_default() += 1;
            }
            let largest = reasons
                .into_iter()
                .max_by_key(|(why, n)| (*n, std::cmp::Reverse(*why)))
                .map(|(why, n)| (n, why.to_string()));
            Pending {
                count: d.snapshot.pods.len(),
                largest,
                to_launch: d
                    .plan
                    .placements
                    .iter()
                    .filter(|p| matches!(p.target, engine::Target::NewNodeClaim(_)))
                    .count(),
            }
        }
    };
    Ok(frame::render(&snap, &pending, &disrupting(ctx), options))
}

/// Nodes (and NodeClaims without one) a disruption command is replacing or
/// removing, with its reason.
fn disrupting(ctx: &Ctx) -> BTreeMap<String, String> {
    ctx.cluster
        .node_claims
        .state()
        .iter()
        .filter_map(|nc| {
            let c = nc.condition(DISRUPTION_REASON)?;
            (c.status == "True").then(|| {
                let name = nc
                    .node_name()
                    .map(str::to_string)
                    .unwrap_or_else(|| kube::ResourceExt::name_any(nc.as_ref()));
                (name, c.reason.clone())
            })
        })
        .collect()
}
