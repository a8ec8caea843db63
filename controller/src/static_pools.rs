//! Static NodePools (Karpenter's `StaticCapacity` gate, off by default): each
//! Ready NodePool with `spec.replicas` is brought to that many NodeClaims,
//! created from its template (the plugin picks the type), or deleted in the
//! order `engine::static_pool` gives. `kubectl scale nodepool` works through
//! the scale subresource. The provisioner never launches into a static
//! NodePool and disruption never consolidates its nodes; it replaces drifted
//! ones, a NodeClaim from the template first, and this loop does not count
//! the node being replaced.

use crate::crds::{NodeClaim, NodePool};
use crate::unseen_claims::UnseenClaims;
use crate::{Ctx, conditions, provisioner};
use engine::static_pool::{Scale, StaticClaim, scale};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vocabulary::labels;

pub const INTERVAL: Duration = Duration::from_secs(2);

/// How long a NodeClaim this loop deleted counts as gone before the store
/// shows it going.
const DELETE_SEEN_WITHIN: Duration = Duration::from_secs(60);

pub async fn run(ctx: Arc<Ctx>) {
    let unseen = UnseenClaims::default();
    let mut deleted: BTreeMap<String, Instant> = BTreeMap::new();
    let mut tick = tokio::time::interval(INTERVAL);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let stored = |name: &str| ctx.cluster.node_claims.get(&ObjectRef::new(name));
        let in_store = |name: &str| stored(name).is_some();
        // Decide on the store only once it holds what this loop created.
        if unseen.awaited(in_store, now) > 0 {
            continue;
        }
        deleted.retain(|name, at| {
            now.duration_since(*at) < DELETE_SEEN_WITHIN
                && stored(name).is_some_and(|c| c.metadata.deletion_timestamp.is_none())
        });
        for np in ctx.cluster.node_pools.state() {
            let Some(replicas) = np.spec.replicas else {
                continue;
            };
            let ready = np
                .status
                .as_ref()
                .is_some_and(|s| conditions::is_true(&s.conditions, "Ready"));
            if np.metadata.deletion_timestamp.is_some() || !ready {
                continue;
            }
            // While drift replaces one of its nodes, the NodePool is briefly
            // one over or under: it is left alone until that is done.
            let name = np.name_any();
            let under_way = ctx
                .cluster
                .node_claims
                .state()
                .iter()
                .any(|c| c.node_pool() == Some(name.as_str()) && replacing(&ctx, c));
            if under_way {
                continue;
            }
            let decision = decide(&ctx, &np, replicas, &deleted);
            if let Err(e) = apply(&ctx, &np, decision, &unseen, &mut deleted).await {
                tracing::warn!(nodepool = %np.name_any(), error = format!("{e:#}"), "static nodepool");
            }
        }
    }
}

/// A node a disruption command holds (drift replacing it).
fn replacing(ctx: &Ctx, c: &NodeClaim) -> bool {
    ctx.disrupting.contains(&c.name_any())
        || c.node_name().is_some_and(|n| ctx.disrupting.contains(n))
}

fn decide(ctx: &Ctx, np: &NodePool, replicas: i64, deleted: &BTreeMap<String, Instant>) -> Scale {
    let name = np.name_any();
    let claims: Vec<Arc<NodeClaim>> = ctx
        .cluster
        .node_claims
        .state()
        .into_iter()
        .filter(|c| {
            c.node_pool() == Some(name.as_str())
                && c.metadata.deletion_timestamp.is_none()
                && !deleted.contains_key(&c.name_any())
        })
        .collect();
    let node_limit = np
        .spec
        .limits
        .as_ref()
        .and_then(|l| l.get(vocabulary::resources::NODES))
        .and_then(|q| engine::parse_resource(vocabulary::resources::NODES, &q.0).ok())
        .map(|n| u32::try_from(n.max(0)).unwrap_or(u32::MAX));
    let replicas = u32::try_from(replicas.max(0)).unwrap_or(u32::MAX);
    let mut views: Vec<StaticClaim> = claims
        .iter()
        .map(|c| StaticClaim {
            name: c.name_any(),
            launched: c.provider_id().is_some(),
            pods: 0,
            do_not_disrupt: false,
        })
        .collect();
    if views.len() as u32 > replicas {
        // Only a scale-down reads the pods, to remove the cheapest first.
        let node_of: BTreeMap<&str, usize> = claims
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.node_name().map(|n| (n, i)))
            .collect();
        for p in ctx.cluster.pods.state() {
            let Some(i) = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| node_of.get(n))
            else {
                continue;
            };
            if crate::snapshot::cluster::is_daemon_set_pod(&p)
                || crate::snapshot::cluster::is_terminal(&p)
            {
                continue;
            }
            views[*i].pods += 1;
            if p.annotations().contains_key(labels::DO_NOT_DISRUPT) {
                views[*i].do_not_disrupt = true;
            }
        }
    }
    scale(replicas, node_limit, &views)
}

async fn apply(
    ctx: &Ctx,
    np: &NodePool,
    decision: Scale,
    unseen: &UnseenClaims,
    deleted: &mut BTreeMap<String, Instant>,
) -> anyhow::Result<()> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    if decision.create > 0 {
        tracing::info!(nodepool = %np.name_any(), count = decision.create, "creating nodeclaims for the static nodepool's replicas");
    }
    for _ in 0..decision.create {
        let claim = template_claim(np)?;
        let created = api.create(&PostParams::default(), &claim).await?;
        unseen.created([created.name_any()], Instant::now());
    }
    for name in decision.delete {
        tracing::info!(nodepool = %np.name_any(), nodeclaim = %name, "deleting a nodeclaim beyond the static nodepool's replicas");
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        deleted.insert(name, Instant::now());
    }
    Ok(())
}

/// A NodeClaim from the NodePool's template alone: the plugin launches the
/// cheapest type its requirements allow.
fn template_claim(np: &NodePool) -> anyhow::Result<NodeClaim> {
    let pool = crate::snapshot::nodepools::node_pool(np, Arc::from(Vec::new()))?;
    let planned = engine::NewNodeClaim {
        node_pool: pool.name.clone(),
        requirements: pool.requirements.clone(),
        instance_types: Vec::new(),
        instance_type_min_values: None,
        requests: engine::ResourceList::new(),
        cheapest: None,
        pods: Vec::new(),
        price_overlays: Vec::new(),
        capacity_overlays: Vec::new(),
    };
    let plan = engine::Plan {
        new_node_claims: vec![planned.clone()],
        ..engine::Plan::default()
    };
    Ok(provisioner::node_claim(np, &plan, &planned))
}
