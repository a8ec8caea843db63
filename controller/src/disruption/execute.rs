//! Carrying out a disruption command, in Karpenter's order: taint the
//! candidates `karpenter.sh/disrupted:NoSchedule`, create the replacements,
//! wait until they are initialized, then delete the candidates' NodeClaims
//! (termination drains them through the Eviction API). If a replacement
//! fails, the candidates are untainted and stay. The first two steps
//! ([`start`]) run in the pass; the wait and the deletion ([`finish`]) run
//! beside the passes.

use super::in_flight::Held;
use crate::Ctx;
use crate::crds::NodeClaim;
use crate::crds::nodeclaim::conditions;
use crate::metrics::{DecisionLabels, DisruptedLabels};
use crate::node_patch;
use crate::node_termination;
use crate::provisioner::{self, Pool};
use crate::slim::Node;
use engine::disruption::{Command, Method};
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The NodeClaims behind the names the engine uses: a Node's (through its
/// providerID) or, for one still launching, the NodeClaim's own. Built once
/// per pass from the stores, so each lookup is not a scan of both.
pub struct ClaimIndex<'a> {
    provider_ids: BTreeMap<&'a str, &'a str>,
    by_provider_id: BTreeMap<&'a str, &'a Arc<NodeClaim>>,
    by_name: BTreeMap<&'a str, &'a Arc<NodeClaim>>,
}

impl<'a> ClaimIndex<'a> {
    pub fn new(nodes: &'a [Arc<Node>], claims: &'a [Arc<NodeClaim>]) -> Self {
        ClaimIndex {
            provider_ids: nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n.provider_id()?)))
                .collect(),
            by_provider_id: claims
                .iter()
                .filter_map(|c| Some((c.provider_id()?, c)))
                .collect(),
            by_name: claims
                .iter()
                .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
                .collect(),
        }
    }

    pub fn of(&self, name: &str) -> Option<&'a Arc<NodeClaim>> {
        match self.provider_ids.get(name) {
            Some(id) => self.by_provider_id.get(id).copied(),
            None => self.by_name.get(name).copied(),
        }
    }
}

/// Expiration: the NodeClaim is deleted whatever budgets or PDBs say;
/// termination still drains it gracefully until terminationGracePeriod.
pub async fn expire(ctx: &Ctx, claim: &NodeClaim) -> anyhow::Result<()> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    terminate(ctx, claim, "Expired").await
}

async fn terminate(ctx: &Ctx, claim: &NodeClaim, reason: &str) -> anyhow::Result<()> {
    ctx.events
        .normal(
            claim,
            "DisruptionTerminating",
            format!("Disrupting NodeClaim: {reason}"),
        )
        .await;
    crate::lifecycle::delete_node_claim(ctx, claim).await?;
    ctx.metrics
        .disrupted
        .get_or_create(&DisruptedLabels {
            nodepool: claim.node_pool().unwrap_or_default().to_string(),
            reason: reason.to_string(),
        })
        .inc();
    tracing::info!(nodeclaim = %claim.name_any(), reason, "disrupting");
    Ok(())
}

struct Targets {
    claims: Vec<Arc<NodeClaim>>,
    nodes: Vec<Arc<Node>>,
}

/// What a command acts on: each candidate's NodeClaim, and its Node where it
/// has one (a NodeClaim still launching has none). All or nothing: a
/// candidate whose NodeClaim is gone fails the command before anything is
/// tainted.
fn targets(
    candidates: &[String],
    nodes: &[Arc<Node>],
    claims: &[Arc<NodeClaim>],
) -> anyhow::Result<Targets> {
    let index = ClaimIndex::new(nodes, claims);
    let by_name: BTreeMap<&str, &Arc<Node>> = nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
        .collect();
    let mut targets = Targets {
        claims: Vec::new(),
        nodes: Vec::new(),
    };
    for name in candidates {
        let claim = index
            .of(name)
            .ok_or_else(|| anyhow::anyhow!("candidate {name} has no NodeClaim any more"))?;
        targets.claims.push(claim.clone());
        if let Some(n) = by_name.get(name.as_str()) {
            targets.nodes.push((*n).clone());
        }
    }
    Ok(targets)
}

/// A command under way: its candidates tainted and held, its replacements
/// created.
pub struct Started {
    command: Command,
    claims: Vec<Arc<NodeClaim>>,
    nodes: Vec<Arc<Node>>,
    replacements: Vec<String>,
    _held: Held,
}

/// Taints the candidates and creates the replacements. The pass waits for
/// this much, so that the next decision sees the replacements (through
/// `unseen_claims`) and the candidates as taken (through `held`).
pub async fn start(
    ctx: &Ctx,
    command: Command,
    pools: &[Pool],
    held: Held,
) -> anyhow::Result<Started> {
    let Targets { claims, nodes } = targets(
        &command.candidates,
        &ctx.cluster.nodes.state(),
        &ctx.cluster.node_claims.state(),
    )?;
    let api = Api::<Node>::all(ctx.client.clone());
    for n in &nodes {
        node_termination::taint(&api, n).await?;
    }
    let replacements = match create_replacements(ctx, &command, pools).await {
        Ok(names) => names,
        Err(e) => {
            untaint_all(ctx, &nodes).await;
            return Err(e.context("creating replacements; the candidates stay"));
        }
    };
    Ok(Started {
        command,
        claims,
        nodes,
        replacements,
        _held: held,
    })
}

/// Waits until the replacements are initialized, then deletes the
/// candidates' NodeClaims; if a replacement fails, untaints the candidates.
pub async fn finish(ctx: &Ctx, started: Started) -> anyhow::Result<()> {
    let Started {
        command,
        claims,
        nodes,
        replacements,
        _held,
    } = started;
    if let Err(e) = wait_initialized(ctx, &replacements).await {
        untaint_all(ctx, &nodes).await;
        return Err(e.context("replacing; the candidates stay"));
    }
    let reason = command.reason.as_str();
    for claim in &claims {
        terminate(ctx, claim, reason).await?;
    }
    deletion_seen(ctx, &claims).await;
    ctx.metrics
        .decisions
        .get_or_create(&DecisionLabels {
            decision: if command.is_replace() {
                "replace"
            } else {
                "delete"
            }
            .into(),
            reason: reason.into(),
            consolidation_type: match command.method {
                Method::Emptiness => "empty",
                Method::MultiNodeConsolidation => "multi",
                Method::SingleNodeConsolidation => "single",
                Method::Drift => "",
            }
            .into(),
        })
        .inc();
    Ok(())
}

/// Waits (a while at most) until the store shows the candidates going, so
/// that once the command lets go of them no loop reading the store (the
/// static NodePool loop) counts them as still there.
async fn deletion_seen(ctx: &Ctx, claims: &[Arc<NodeClaim>]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let going = |c: &Arc<NodeClaim>| {
        ctx.cluster
            .node_claims
            .get(&kube::runtime::reflector::ObjectRef::new(&c.name_any()))
            .is_none_or(|s| s.metadata.deletion_timestamp.is_some())
    };
    while Instant::now() < deadline && !claims.iter().all(going) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn untaint_all(ctx: &Ctx, nodes: &[Arc<Node>]) {
    let api = Api::<Node>::all(ctx.client.clone());
    for n in nodes {
        // A fresh read: the watch's copy may not show the taint added yet.
        let fresh = match api.get_opt(&n.name_any()).await {
            Ok(Some(fresh)) => fresh,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(node = %n.name_any(), error = %e, "untainting");
                continue;
            }
        };
        if let Err(u) = untaint(&api, &fresh).await {
            tracing::warn!(node = %n.name_any(), error = format!("{u:#}"), "untainting");
        }
    }
}

/// Creates the command's replacements; the names of those created.
async fn create_replacements(
    ctx: &Ctx,
    cmd: &Command,
    pools: &[Pool],
) -> anyhow::Result<Vec<String>> {
    let plan = &cmd.replacements;
    let by_name: BTreeMap<&str, &Pool> =
        pools.iter().map(|p| (p.engine.name.as_str(), p)).collect();
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let mut created = Vec::new();
    for claim in &plan.new_node_claims {
        let pool = by_name
            .get(claim.node_pool.as_str())
            .ok_or_else(|| anyhow::anyhow!("NodePool {} is gone", claim.node_pool))?;
        let object = provisioner::node_claim(&pool.object, plan, claim);
        let made = api
            .create(&PostParams::default(), &object)
            .await
            .map_err(anyhow::Error::from)?;
        let name = made.name_any();
        ctx.events
            .normal(
                &made,
                "DisruptionLaunching",
                format!("Launching NodeClaim: {}", cmd.reason.as_str()),
            )
            .await;
        ctx.nominations.nominate(&name, Instant::now());
        ctx.unseen_claims.created([name.clone()], Instant::now());
        ctx.metrics
            .created
            .get_or_create(&crate::metrics::CreatedLabels {
                nodepool: claim.node_pool.clone(),
                reason: cmd.reason.as_str().to_string(),
            })
            .inc();
        tracing::info!(nodeclaim = %name, "replacement created");
        created.push(name);
    }
    Ok(created)
}

async fn wait_initialized(ctx: &Ctx, names: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + ctx.options.disruption.replacement_timeout;
    loop {
        let mut waiting = 0;
        for name in names {
            match ctx.cluster.node_claims.find(|c| c.name_any() == *name) {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    anyhow::bail!("replacement {name} is being deleted")
                }
                Some(c) if c.is_true(conditions::INITIALIZED) => {}
                Some(_) => waiting += 1,
                None => {
                    // The watcher may not have seen it yet; ask the API server.
                    let got = Api::<NodeClaim>::all(ctx.client.clone())
                        .get_opt(name)
                        .await?;
                    if got.is_none() {
                        anyhow::bail!("replacement {name} is gone");
                    }
                    waiting += 1;
                }
            }
        }
        if waiting == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("{waiting} replacement(s) not initialized in time");
        }
        // Keep them from looking empty while they wait for their pods.
        for name in names {
            ctx.nominations.nominate(name, Instant::now());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Removes the disruption taint `seen` shows.
pub(super) async fn untaint(api: &Api<Node>, seen: &Node) -> anyhow::Result<()> {
    let disrupted = |t: &Taint| t.key == vocabulary::taints::DISRUPTED;
    node_patch::apply(api, seen, |n| node_patch::taint_ops(n, disrupted, &[])).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn names<T: ResourceExt>(list: &[Arc<T>]) -> Vec<String> {
        list.iter().map(|o| o.name_any()).collect()
    }

    #[test]
    fn candidates_resolve_through_their_nodes_provider_id_or_their_own_name() {
        // The Node's name is the instance's, not the NodeClaim's.
        let nodes = vec![
            fixtures::node("ip-10-0-0-1").node(),
            fixtures::node("unmanaged").node(),
        ];
        let mut registered = (*fixtures::claim("default-abcde").claim()).clone();
        if let Some(s) = registered.status.as_mut() {
            s.provider_id = Some("test://ip-10-0-0-1".into());
        }
        let claims = vec![
            Arc::new(registered),
            fixtures::claim("default-launching")
                .no_provider_id()
                .claim(),
        ];
        let candidates = ["ip-10-0-0-1".to_string(), "default-launching".to_string()];
        let Ok(t) = targets(&candidates, &nodes, &claims) else {
            panic!("every candidate has a NodeClaim");
        };
        assert_eq!(names(&t.claims), ["default-abcde", "default-launching"]);
        assert_eq!(
            names(&t.nodes),
            ["ip-10-0-0-1"],
            "a launching claim has no Node to taint"
        );
    }

    #[test]
    fn a_candidate_without_a_claim_fails_the_whole_command() {
        let nodes = vec![fixtures::node("a").node(), fixtures::node("b").node()];
        let claims = vec![fixtures::claim("a").claim()];
        let Err(err) = targets(&["a".into(), "b".into()], &nodes, &claims) else {
            panic!("b has no NodeClaim");
        };
        assert!(err.to_string().contains("candidate b"), "{err}");
    }
}
