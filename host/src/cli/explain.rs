//! `karpenter explain pod NAME` and `karpenter explain node NAME`: ask the
//! live cluster why a pod is pending and what the provisioner would do about
//! it, or why a node is or is not being disrupted, by running the same
//! decisions the controller runs (without acting on them).

use super::providers;
use anyhow::Context;
use clap::{Args, Subcommand};
use karpenter_controller::slim::Pod;
use karpenter_controller::snapshot::cluster::{is_daemon_set_pod, is_provisionable, is_terminal};
use karpenter_controller::{
    self as controller, Ctx, cluster::Cluster, metrics::Metrics, provisioner,
};
use kube::api::Api;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum ExplainCommand {
    /// Why a pod is pending, or where it is going.
    Pod(ExplainPod),
    /// Why a node is or is not being disrupted.
    Node(ExplainNode),
}

#[derive(Debug, Args)]
pub struct ExplainNode {
    /// A Node's name, or a NodeClaim's that has no Node yet.
    pub name: String,
    /// The controller's plugins, whose instance types drive the answer; the
    /// providers built into this binary when omitted.
    #[arg(long, env = "PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// The controller's feature gates (NodeOverlay changes prices,
    /// CapacityBuffer adds the buffers' room to keep).
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
}

#[derive(Debug, Args)]
pub struct ExplainPod {
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The controller's plugins, whose instance types drive the answer; the
    /// providers built into this binary when omitted.
    #[arg(long, env = "PLUGIN_DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// The controller's feature gates (NodeOverlay changes prices,
    /// CapacityBuffer adds the buffers' room to keep).
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
}

pub async fn run(cmd: ExplainCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ExplainCommand::Pod(args) => pod(args).await,
        ExplainCommand::Node(args) => node(args).await,
    }
}

/// The controller's context over the live cluster, acting on nothing.
pub(super) async fn context(
    plugin_dir: Option<&std::path::Path>,
    feature_gates: &str,
) -> anyhow::Result<Arc<Ctx>> {
    let gates = super::controller::feature_gates(feature_gates)?;
    let client = kube::Client::try_default()
        .await
        .context("no cluster: set KUBECONFIG")?;
    if plugin_dir.is_none() {
        eprintln!(
            "using the built-in providers ({}) with default settings; pass --plugin-dir for the controller's own plugins",
            providers::built_in()
        );
    }
    let registry = providers::open(plugin_dir).await?;
    let metrics = Arc::new(Metrics::default());
    let cluster = Cluster::start(&client, metrics.clone()).await;
    cluster.wait_ready().await?;
    let ctx = Ctx::new(
        client,
        registry,
        cluster,
        metrics,
        controller::Options {
            node_overlay: gates.get("NodeOverlay").copied().unwrap_or(false),
            capacity_buffer: gates.get("CapacityBuffer").copied().unwrap_or(false),
            ..controller::Options::default()
        },
    );
    ctx.overlays.wait_ready().await?;
    ctx.buffers.refresh(&ctx.client).await?;
    Ok(ctx)
}

async fn node(args: ExplainNode) -> anyhow::Result<ExitCode> {
    let ctx = context(args.plugin_dir.as_deref(), &args.feature_gates).await?;
    let mut observer = controller::disruption::Observer::default();
    let d = controller::disruption::decide(&ctx, &mut observer).await?;
    super::print(&describe_node(&d.plan, &args.name));
    Ok(ExitCode::SUCCESS)
}

fn describe_node(plan: &engine::disruption::DisruptionPlan, name: &str) -> String {
    let who = format!("node {name}");
    if plan.expired.iter().any(|n| n == name) {
        return format!(
            "{who} has expired (expireAfter): it is being replaced, whatever budgets say"
        );
    }
    if let Some(c) = plan
        .command
        .as_ref()
        .filter(|c| c.candidates.iter().any(|n| n == name))
    {
        let how = if c.is_replace() {
            format!(
                "replaced by {} cheaper node(s)",
                c.replacements.new_node_claims.len()
            )
        } else {
            "deleted; its pods fit elsewhere".to_string()
        };
        return format!(
            "{who} would be disrupted now by {} ({}): {how}, saving ${:.4}/h of ${:.4}/h",
            c.method.as_str(),
            c.reason.as_str(),
            c.savings,
            c.candidates_price
        );
    }
    match plan.kept.iter().find(|k| k.name == name) {
        Some(k) => {
            let mut out = format!("{who} (NodePool {}) stays:", k.node_pool);
            for r in &k.reasons {
                let kind = match r.kind {
                    engine::disruption::KeepKind::DisruptionBlocked => "DisruptionBlocked",
                    engine::disruption::KeepKind::Unconsolidatable => "Unconsolidatable",
                    engine::disruption::KeepKind::Waiting => "Waiting",
                };
                let _ = write!(out, "\n  {kind}: {}", r.message);
            }
            out
        }
        None => format!("{who} is not managed by a NodePool this controller can see"),
    }
}

async fn pod(args: ExplainPod) -> anyhow::Result<ExitCode> {
    let client = kube::Client::try_default()
        .await
        .context("no cluster: set KUBECONFIG")?;
    let pod = Api::<Pod>::namespaced(client.clone(), &args.namespace)
        .get_opt(&args.name)
        .await?
        .with_context(|| format!("pod {}/{} not found", args.namespace, args.name))?;
    let who = format!("pod {}/{}", args.namespace, args.name);
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        super::print(&format!("{who} is bound to node {node} ({phase})"));
        return Ok(ExitCode::SUCCESS);
    }
    if !is_provisionable(&pod) {
        let why = if pod.metadata.deletion_timestamp.is_some() {
            "it is being deleted"
        } else if is_terminal(&pod) {
            "it has finished"
        } else if is_daemon_set_pod(&pod) {
            "it is a DaemonSet pod: its node brings it"
        } else {
            "kube-scheduler has not marked it unschedulable (yet): it may still fit an existing node"
        };
        super::print(&format!("{who} is not waiting for a new node: {why}"));
        return Ok(ExitCode::SUCCESS);
    }

    let failed = last_launch_failure(&client, &pod).await;
    drop(client);
    let ctx = context(args.plugin_dir.as_deref(), &args.feature_gates).await?;
    let Some(decision) = provisioner::decide(&ctx).await? else {
        super::print(&format!("{who}: no pod is waiting for a node"));
        return Ok(ExitCode::SUCCESS);
    };
    let mut out = describe(&decision, &pod, &who);
    if let Some(failed) = failed {
        let _ = write!(out, "\n  last launch for it: {failed}");
    }
    super::print(&out);
    Ok(ExitCode::SUCCESS)
}

/// The newest `LaunchFailed` event the controller gave the pod (a NodeClaim
/// made for it that did not launch, and why), with its age.
async fn last_launch_failure(client: &kube::Client, pod: &Pod) -> Option<String> {
    use k8s_openapi::api::core::v1::Event;
    let uid = pod.metadata.uid.as_deref()?;
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let fields = format!("involvedObject.uid={uid},reason=LaunchFailed");
    let events = match Api::<Event>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().fields(&fields))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the pod's events");
            return None;
        }
    };
    let when = |e: &Event| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or(e.last_timestamp.as_ref().map(|t| t.0))
            .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    let newest = events.iter().max_by_key(|e| when(e))?;
    let age = when(newest)
        .map(|t| {
            format!(
                "{} s ago",
                jiff::Timestamp::now().duration_since(t).as_secs().max(0)
            )
        })
        .unwrap_or_else(|| "at an unknown time".into());
    Some(format!(
        "{} ({age})",
        newest.message.as_deref().unwrap_or_default()
    ))
}

fn describe(d: &provisioner::Decision, pod: &Pod, who: &str) -> String {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let plan = &d.plan;
    let mut out = String::new();
    if let Some(u) = plan.unschedulable.iter().find(|u| u.pod.uid == uid) {
        let _ = write!(out, "{who} cannot be scheduled: {}", u.reason);
        return out;
    }
    let Some(p) = plan.placements.iter().find(|p| p.pod.uid == uid) else {
        let _ = write!(
            out,
            "{who} was left out of scheduling (see the controller's log)"
        );
        return out;
    };
    match &p.target {
        engine::Target::ExistingNode(n) => {
            let in_flight = d.snapshot.nodes.iter().any(|x| &x.name == n && x.in_flight);
            if in_flight {
                let _ = write!(
                    out,
                    "{who} will run on nodeclaim/{n}, which is still launching"
                );
            } else {
                let _ = write!(out, "{who} fits existing node {n}");
            }
        }
        engine::Target::NewNodeClaim(i) => {
            let claim = &plan.new_node_claims[*i];
            let types: Vec<&str> = plan.instance_type_names(claim).collect();
            let _ = writeln!(
                out,
                "{who} needs a new node from NodePool {} ({} pods would share it)",
                claim.node_pool,
                claim.pods.len()
            );
            if let Some(c) = &claim.cheapest {
                let overlay = c
                    .price_overlay
                    .as_deref()
                    .map(|o| format!(", priced by NodeOverlay {o}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  cheapest: {} in {} ({}) at ${:.4}/h{overlay}",
                    c.instance_type,
                    c.zone.as_deref().unwrap_or("any zone"),
                    c.capacity_type,
                    c.price
                );
            }
            let shown: Vec<&str> = types.iter().take(10).copied().collect();
            let _ = write!(
                out,
                "  {} compatible instance types: {}{}",
                types.len(),
                shown.join(", "),
                if types.len() > 10 { ", ..." } else { "" }
            );
        }
    }
    out
}
