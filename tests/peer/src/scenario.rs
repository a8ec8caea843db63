//! The six scenarios, modelled on Karpenter's KWOK performance suite, and what
//! the harness watches while they run. Nothing here asks either controller
//! anything: pods, nodes and NodeClaims are read from the API server.

use crate::cluster::Cluster;
use crate::contender::Running;
use crate::workload::{App, NAMESPACE, POD_LABEL, Pool};
use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    ScaleOut,
    HostnameSpread,
    Consolidation,
    Drift,
    ManyNodepools,
    DoNotDisrupt,
}

pub const ALL: [Scenario; 6] = [
    Scenario::ScaleOut,
    Scenario::HostnameSpread,
    Scenario::Consolidation,
    Scenario::Drift,
    Scenario::ManyNodepools,
    Scenario::DoNotDisrupt,
];

/// How long the cluster must stay unchanged (same NodeClaims, same Nodes, all
/// pods Running) to count as stable; the time reported is to its last change.
const STABLE_FOR: Duration = Duration::from_secs(60);

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::ScaleOut => "scale-out",
            Scenario::HostnameSpread => "hostname-spread",
            Scenario::Consolidation => "consolidation",
            Scenario::Drift => "drift",
            Scenario::ManyNodepools => "many-nodepools",
            Scenario::DoNotDisrupt => "do-not-disrupt",
        }
    }

    /// Pod counts at scale 1, as in the list; `counts` scales them.
    pub fn describe(self, scale: f64) -> String {
        let n = |x: u32| scaled(x, scale);
        match self {
            Scenario::ScaleOut => format!("{} pods, two sizes, from zero", n(500) * 2),
            Scenario::HostnameSpread => format!("{} pods, one per node (hostname spread)", n(2000)),
            Scenario::Consolidation => format!("{} pods, then {}", n(500) * 2, n(350) * 2),
            Scenario::Drift => format!(
                "{} pods (half hostname-spread), then the template changes",
                n(300) * 2
            ),
            Scenario::ManyNodepools => format!("{} pods over 20 weighted NodePools", n(50) * 20),
            Scenario::DoNotDisrupt => format!(
                "{} pods ({} do-not-disrupt), then {}",
                n(500) * 2 + n(100),
                n(100),
                n(250) * 2 + n(100)
            ),
        }
    }
}

pub fn scaled(x: u32, scale: f64) -> u32 {
    ((x as f64 * scale).round() as u32).max(1)
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Timings {
    /// From the workload's creation to every pod Running.
    pub running_s: Option<f64>,
    /// From the change (scale-down, template edit) to the cluster's last
    /// change before it held still.
    pub stable_s: Option<f64>,
    pub pods: u32,
    pub notes: Vec<String>,
}

pub struct Ctx<'a> {
    pub cluster: &'a Cluster,
    pub controller: &'a mut Running,
    pub timeout: Duration,
    pub scale: f64,
}

pub async fn run(s: Scenario, ctx: &mut Ctx<'_>) -> Result<Timings> {
    let factor = ctx.scale;
    let n = |x: u32| scaled(x, factor);
    let mut t = Timings::default();
    let small = |name: &str, r| App::new(name, r, "900m", "3100Mi");
    let large = |name: &str, r| App::new(name, r, "3500m", "28Gi");
    match s {
        Scenario::ScaleOut => {
            pools(ctx, &[Pool::default_named("default", "Never")])?;
            let apps = [small("small", n(500)), large("large", n(500))];
            scale_out(ctx, &mut t, &apps).await?;
        }
        Scenario::HostnameSpread => {
            pools(ctx, &[Pool::default_named("default", "Never")])?;
            let mut app = App::new("spread", n(2000), "100m", "128Mi");
            app.hostname_spread = true;
            scale_out(ctx, &mut t, &[app]).await?;
        }
        Scenario::Consolidation => {
            pools(ctx, &[Pool::default_named("default", "0s")])?;
            let apps = [small("small", n(500)), large("large", n(500))];
            scale_out(ctx, &mut t, &apps).await?;
            let start = Instant::now();
            for a in &apps {
                scale(ctx, &a.name, n(350)).await?;
            }
            let want = n(350) * 2;
            t.stable_s = Some(stable(ctx, start, want, |_| true).await?);
        }
        Scenario::Drift => {
            pools(ctx, &[Pool::default_named("default", "Never")])?;
            let mut spread = small("spread", n(300));
            spread.hostname_spread = true;
            let apps = [spread, large("standard", n(300))];
            scale_out(ctx, &mut t, &apps).await?;
            let before: BTreeSet<String> = nodes(ctx).await?.into_iter().collect();
            let start = Instant::now();
            let mut pool = Pool::default_named("default", "Never");
            pool.labels
                .push(("peer.example.com/generation".into(), "2".into()));
            pools(ctx, &[pool])?;
            t.stable_s = Some(
                stable(ctx, start, t.pods, |now: &BTreeSet<String>| {
                    now.is_disjoint(&before)
                })
                .await?,
            );
        }
        Scenario::ManyNodepools => {
            // Disjoint by a team label each pool puts on its nodes and each
            // app selects; weights 1..20, each pool also narrowed to a family.
            let families = ["c", "s", "m"];
            let mut ps = Vec::new();
            let mut apps = Vec::new();
            for i in 0..20u32 {
                let team = format!("team-{i:02}");
                let mut p = Pool::default_named(&team, "Never");
                p.weight = Some(i + 1);
                p.labels
                    .push(("peer.example.com/team".into(), team.clone()));
                p.requirements.push(json!({
                    "key": "karpenter.kwok.sh/instance-family", "operator": "In",
                    "values": [families[i as usize % 3]]
                }));
                ps.push(p);
                let mut a = App::new(
                    &team,
                    n(50),
                    if i % 2 == 0 { "900m" } else { "1500m" },
                    "2Gi",
                );
                a.node_selector.push(("peer.example.com/team".into(), team));
                apps.push(a);
            }
            pools(ctx, &ps)?;
            scale_out(ctx, &mut t, &apps).await?;
        }
        Scenario::DoNotDisrupt => {
            pools(ctx, &[Pool::default_named("default", "0s")])?;
            let mut protected = App::new("protected", n(100), "900m", "450Mi");
            protected.do_not_disrupt = true;
            let apps = [small("small", n(500)), large("large", n(500)), protected];
            scale_out(ctx, &mut t, &apps).await?;
            let protected_nodes = pod_nodes(ctx, "protected").await?;
            let start = Instant::now();
            scale(ctx, "small", n(250)).await?;
            scale(ctx, "large", n(250)).await?;
            let want = n(250) * 2 + n(100);
            t.stable_s = Some(stable(ctx, start, want, |_| true).await?);
            let kept = pod_nodes(ctx, "protected").await?;
            let moved = protected_nodes.difference(&kept).count();
            if moved > 0 {
                t.notes
                    .push(format!("{moved} nodes of do-not-disrupt pods went away"));
            }
            // Which nodes no consolidation may touch: where kube-scheduler
            // put the do-not-disrupt pods decides part of the end price.
            let mut held: BTreeMap<String, u32> = BTreeMap::new();
            for n in karpenter_nodes(&ctx.cluster.client).await? {
                if n.metadata
                    .name
                    .as_ref()
                    .is_some_and(|name| kept.contains(name))
                {
                    let ty = n.labels().get("node.kubernetes.io/instance-type");
                    let ty = ty.cloned().unwrap_or_default();
                    *held.entry(ty).or_default() += 1;
                }
            }
            let held: Vec<String> = held.iter().map(|(t, n)| format!("{n}× {t}")).collect();
            t.notes.push(format!(
                "nodes holding do-not-disrupt pods at the end: {}",
                held.join(", ")
            ));
        }
    }
    Ok(t)
}

fn pools(ctx: &Ctx<'_>, pools: &[Pool]) -> Result<()> {
    let items: Vec<_> = pools.iter().map(Pool::manifest).collect();
    ctx.cluster
        .apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
}

/// Creates the apps and waits until every pod runs; records their count and
/// the seconds from creation.
async fn scale_out(ctx: &mut Ctx<'_>, t: &mut Timings, apps: &[App]) -> Result<()> {
    let start = Instant::now();
    let items: Vec<_> = apps.iter().map(App::manifest).collect();
    ctx.cluster
        .apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())?;
    let want: u32 = apps.iter().map(|a| a.replicas).sum();
    t.pods = want;
    let deadline = start + ctx.timeout;
    loop {
        check_alive(ctx)?;
        let (running, _) = pod_phases(ctx).await?;
        if running >= want {
            t.running_s = Some(start.elapsed().as_secs_f64());
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "pods not all Running after {:?} ({running} of {want})",
                ctx.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn scale(ctx: &Ctx<'_>, app: &str, replicas: u32) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(ctx.cluster.client.clone(), NAMESPACE);
    api.patch(
        app,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .with_context(|| format!("scaling {app}"))?;
    Ok(())
}

/// Waits until `want` pods run, `done` holds for the node names, and
/// NodeClaims and Nodes stay unchanged for `STABLE_FOR`; seconds from `start`
/// to the last change.
async fn stable(
    ctx: &mut Ctx<'_>,
    start: Instant,
    want: u32,
    done: impl Fn(&BTreeSet<String>) -> bool,
) -> Result<f64> {
    let deadline = start + ctx.timeout;
    let mut last: Option<(BTreeSet<String>, BTreeSet<String>)> = None;
    let mut changed = start;
    loop {
        check_alive(ctx)?;
        let now = (nodes(ctx).await?.into_iter().collect(), claims(ctx).await?);
        if last.as_ref() != Some(&now) {
            changed = Instant::now();
        }
        let (running, pending) = pod_phases(ctx).await?;
        let settled = done(&now.0) && running >= want && pending == 0;
        last = Some(now);
        if settled && changed.elapsed() >= STABLE_FOR {
            return Ok(changed.duration_since(start).as_secs_f64());
        }
        if Instant::now() > deadline {
            bail!("not stable after {:?}", ctx.timeout);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn check_alive(ctx: &mut Ctx<'_>) -> Result<()> {
    if let Some(status) = ctx.controller.exited() {
        let log = std::fs::read_to_string(&ctx.controller.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        bail!(
            "the controller exited ({status}); its log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// Workload pods Running (and not being deleted), and Pending, from one list.
async fn pod_phases(ctx: &Ctx<'_>) -> Result<(u32, u32)> {
    let api: Api<Pod> = Api::namespaced(ctx.cluster.client.clone(), NAMESPACE);
    let selector = format!("{}={}", POD_LABEL.0, POD_LABEL.1);
    let (mut running, mut pending) = (0, 0);
    for p in api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") if p.metadata.deletion_timestamp.is_none() => running += 1,
            Some("Pending") => pending += 1,
            _ => {}
        }
    }
    Ok((running, pending))
}

async fn pod_nodes(ctx: &Ctx<'_>, app: &str) -> Result<BTreeSet<String>> {
    let api: Api<Pod> = Api::namespaced(ctx.cluster.client.clone(), NAMESPACE);
    Ok(api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.spec.and_then(|s| s.node_name))
        .collect())
}

/// The nodes the autoscaler made.
pub async fn karpenter_nodes(client: &kube::Client) -> Result<Vec<Node>> {
    let api: Api<Node> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await?
        .items)
}

async fn nodes(ctx: &Ctx<'_>) -> Result<Vec<String>> {
    Ok(karpenter_nodes(&ctx.cluster.client)
        .await?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect())
}

async fn claims(ctx: &Ctx<'_>) -> Result<BTreeSet<String>> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    let api: Api<DynamicObject> =
        Api::all_with(ctx.cluster.client.clone(), &ApiResource::from_gvk(&gvk));
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect())
}
