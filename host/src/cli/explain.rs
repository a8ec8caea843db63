//! `karpenter explain pod NAME`: asks the live cluster why a pod is pending
//! and what the provisioner would do about it, by running the same decision
//! the controller runs (without creating anything).

use super::files;
use crate::controller::{self, Ctx, cluster::Cluster, metrics::Metrics, provisioner};
use crate::plugins::{Registry, Runtime, RuntimeOptions};
use crate::snapshot::cluster::{is_daemon_set_pod, is_provisionable, is_terminal};
use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum ExplainCommand {
    /// Why a pod is pending, or where it is going.
    Pod(ExplainPod),
}

#[derive(Debug, Args)]
pub struct ExplainPod {
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The controller's plugins (their instance types drive the answer).
    #[arg(long, env = "PLUGIN_DIR", default_value = "target/plugins")]
    pub plugin_dir: PathBuf,
}

pub async fn run(cmd: ExplainCommand) -> anyhow::Result<ExitCode> {
    let ExplainCommand::Pod(args) = cmd;
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

    let dir = Dir::open_ambient_dir(&args.plugin_dir, ambient_authority())
        .with_context(|| format!("opening {}", args.plugin_dir.display()))?;
    let precompiled = files::precompiled_dir();
    let registry = Registry::open(
        Runtime::new(RuntimeOptions {
            precompiled,
            ..RuntimeOptions::default()
        })?,
        dir,
    )
    .await?;
    let metrics = Arc::new(Metrics::default());
    let cluster = Cluster::start(&client, metrics.clone());
    cluster.wait_ready().await?;
    let ctx = Ctx::new(
        client,
        registry,
        cluster,
        metrics,
        controller::Options::default(),
    );
    let Some(decision) = provisioner::decide(&ctx).await? else {
        super::print(&format!("{who}: no pod is waiting for a node"));
        return Ok(ExitCode::SUCCESS);
    };
    super::print(&describe(&decision, &pod, &who));
    Ok(ExitCode::SUCCESS)
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
                let _ = writeln!(
                    out,
                    "  cheapest: {} in {} ({}) at ${:.4}/h",
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
