//! Provisioning: pending pods in, NodeClaims out. Each batch snapshots the
//! cluster (nodes and NodeClaims before pods, as Karpenter does, so a pod
//! that just got bound is never counted twice), asks each NodePool's plugin
//! for instance types, runs the engine and creates the NodeClaims it plans.

use super::Ctx;
use super::batcher;
use crate::crds::nodeclaim::ResourceRequirements;
use crate::crds::nodepool::NodeSelectorRequirementWithMinValues;
use crate::crds::{NodeClaim, NodeClaimSpec, NodePool};
use crate::slim::Pod;
use crate::snapshot;
use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vocabulary::labels;

/// While pods wait for nodes, a batch runs at least this often even without
/// a trigger (an offering may have come back, a NodeClaim may have failed).
const RECHECK: Duration = Duration::from_secs(30);

/// NodeClaim creates in flight at once. More were no faster for a batch of
/// 1,000: the API server is the limit.
pub const CREATES_IN_FLIGHT: usize = 64;

/// What one batch did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub pending: usize,
    pub created: Vec<String>,
    pub unschedulable: usize,
    /// Reading the stores, the NodeClasses and the instance types.
    pub snapshotting: Duration,
    pub scheduling: Duration,
    /// Building and creating the NodeClaims.
    pub creating: Duration,
}

pub async fn run(ctx: Arc<Ctx>) {
    let mut triggers = ctx.cluster.provision.subscribe();
    // Pods may have been pending before this replica started leading.
    let mut wake = Some(tokio::time::Instant::now());
    while batcher::next_batch(&mut triggers, ctx.options.batch, wake)
        .await
        .is_some()
    {
        let closed = Instant::now();
        match provision(&ctx).await {
            Ok(o) => {
                ctx.metrics.queue_depth.set(o.pending as i64);
                ctx.metrics.unschedulable.set(o.unschedulable as i64);
                if o.pending > 0 {
                    tracing::info!(
                        pending = o.pending,
                        created = o.created.len(),
                        unschedulable = o.unschedulable,
                        snapshot_ms = o.snapshotting.as_millis() as u64,
                        scheduling_ms = o.scheduling.as_millis() as u64,
                        create_ms = o.creating.as_millis() as u64,
                        batch_ms = closed.elapsed().as_millis() as u64,
                        "provisioned"
                    );
                    wake = Some(tokio::time::Instant::now() + RECHECK);
                } else {
                    wake = None;
                }
            }
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "provisioning failed");
                wake = Some(tokio::time::Instant::now() + RECHECK);
            }
        }
    }
}

/// A NodePool ready to provision from, with what the engine needs.
pub(crate) struct Pool {
    pub(crate) object: Arc<NodePool>,
    pub(crate) engine: engine::NodePool,
}

/// What the engine decided for the pods pending now.
pub struct Decision {
    pub snapshot: engine::Snapshot,
    pub plan: engine::Plan,
    pools: Vec<Pool>,
    pub snapshotting: Duration,
    pub scheduling: Duration,
}

/// Snapshots the cluster and runs the engine; `None` when no pod waits.
/// Creates nothing: `karpenter explain` uses it as is.
pub async fn decide(ctx: &Ctx) -> anyhow::Result<Option<Decision>> {
    let started = Instant::now();
    let (snapshot, pools) = snapshot(ctx).await?;
    if snapshot.pods.is_empty() {
        return Ok(None);
    }
    let snapshotting = started.elapsed();
    let started = Instant::now();
    let (snapshot, plan) = tokio::task::spawn_blocking(move || {
        let plan = engine::schedule(&snapshot);
        (snapshot, plan)
    })
    .await
    .context("scheduling panicked")?;
    Ok(Some(Decision {
        snapshot,
        plan,
        pools,
        snapshotting,
        scheduling: started.elapsed(),
    }))
}

/// One batch: decide, then create the planned NodeClaims.
pub async fn provision(ctx: &Ctx) -> anyhow::Result<Outcome> {
    store_has_created_claims(ctx).await;
    let Some(Decision {
        snapshot,
        plan,
        pools,
        snapshotting,
        scheduling,
    }) = decide(ctx).await?
    else {
        return Ok(Outcome::default());
    };
    let started = Instant::now();
    let pending = snapshot.pods.len();
    ctx.buffers.record(&plan, &snapshot.pods);
    // The whole cluster as the engine saw it: not needed past the plan.
    drop(snapshot);
    ctx.metrics
        .scheduling_duration
        .observe(scheduling.as_secs_f64());

    let by_name: BTreeMap<&str, &Pool> =
        pools.iter().map(|p| (p.engine.name.as_str(), p)).collect();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let writing = ctx.batch_writes.start();
    // Each object is built as its create starts: a thousand NodeClaims, each
    // listing the instance types it may launch as, are megabytes at once.
    // (By index: a closure taking `&NewNodeClaim` makes the task's future
    // fail the compiler's `Send` check.)
    let created: Vec<Option<String>> = futures::stream::iter(0..plan.new_node_claims.len())
        .map(|i| {
            let claim = &plan.new_node_claims[i];
            let object = by_name.get(claim.node_pool.as_str()).map(|pool| {
                (
                    claim.node_pool.clone(),
                    node_claim(&pool.object, &plan, claim),
                )
            });
            create(api.clone(), ctx.metrics.clone(), object)
        })
        .buffered(CREATES_IN_FLIGHT)
        .collect()
        .await;
    drop(writing);
    ctx.unseen_claims
        .created(created.iter().flatten().cloned(), Instant::now());

    publish_decisions(ctx, &plan, &created);
    Ok(Outcome {
        pending,
        created: created.into_iter().flatten().collect(),
        unschedulable: plan.unschedulable.len(),
        snapshotting,
        scheduling,
        creating: started.elapsed(),
    })
}

/// Returns once the store holds every NodeClaim earlier batches created
/// (each waited for at most `unseen_claims::MAX_WAIT`).
pub(crate) async fn store_has_created_claims(ctx: &Ctx) {
    let mut changes = ctx.cluster.node_claim_events.subscribe();
    let store = &ctx.cluster.node_claims;
    let in_store = |name: &str| store.get(&ObjectRef::new(name)).is_some();
    while ctx.unseen_claims.awaited(in_store, Instant::now()) > 0 {
        // A NodeClaim's arrival is an event; the timeout rechecks the bound.
        let next = tokio::time::timeout(Duration::from_millis(500), changes.recv()).await;
        if let Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) = next {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

async fn create(
    api: Api<NodeClaim>,
    metrics: Arc<super::metrics::Metrics>,
    object: Option<(String, NodeClaim)>,
) -> Option<String> {
    let (pool, object) = object?;
    match api.create(&PostParams::default(), &object).await {
        Ok(c) => {
            metrics
                .created
                .get_or_create(&super::metrics::CreatedLabels {
                    nodepool: pool,
                    reason: "provisioning".into(),
                })
                .inc();
            Some(c.name_any())
        }
        Err(e) => {
            tracing::error!(nodepool = %pool, error = %e, "creating NodeClaim");
            None
        }
    }
}

/// The engine's input for the cluster as the watchers see it now.
async fn snapshot(ctx: &Ctx) -> anyhow::Result<(engine::Snapshot, Vec<Pool>)> {
    let nodes = ctx.cluster.nodes.state();
    let node_claims = ctx.cluster.node_claims.state();
    let daemon_sets = ctx.cluster.daemon_sets.state();
    let pods = ctx.cluster.pods.state();
    let buffered = ctx.buffers.pods();
    if buffered.is_empty() && !pods.iter().any(|p| snapshot::cluster::is_provisionable(p)) {
        return Ok((engine::Snapshot::default(), Vec::new()));
    }
    let pools = pools(ctx).await;
    let engine_pools: Vec<engine::NodePool> = pools.iter().map(|p| p.engine.clone()).collect();
    let converted = snapshot::cluster::build(
        &snapshot::cluster::Objects {
            pods: &pods,
            nodes: &nodes,
            node_claims: &node_claims,
            daemon_sets: &daemon_sets,
        },
        &engine_pools,
    );
    for why in &converted.skipped {
        tracing::warn!(error = %why, "object left out of scheduling");
    }
    let mut pending = converted.pods;
    let registered: BTreeMap<&str, &str> = node_claims
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.node_name()?)))
        .collect();
    ctx.nominations.apply(&mut pending, |claim| {
        registered.get(claim).map(|n| n.to_string())
    });
    pending.extend(buffered.iter().cloned());
    Ok((
        engine::Snapshot {
            node_pools: engine_pools,
            nodes: converted.nodes,
            daemon_sets: converted.daemon_sets,
            pods: pending,
            options: ctx.options.engine,
        },
        pools,
    ))
}

/// The NodePools that can provision now, highest weight first: each with
/// its plugin's instance types, minus offerings that just failed.
pub(crate) async fn pools(ctx: &Ctx) -> Vec<Pool> {
    let mut out = Vec::new();
    let mut node_pools = ctx.cluster.node_pools.state();
    node_pools.sort_by(|a, b| {
        b.spec
            .weight
            .unwrap_or(0)
            .cmp(&a.spec.weight.unwrap_or(0))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    node_pools.retain(|np| np.metadata.deletion_timestamp.is_none());
    // The NodePools of one NodeClass kind ask its plugin one after another:
    // a plugin builds its catalog once per instance, so calls at once would
    // each start an instance and build it again. Different plugins are asked
    // at once, so one slow plugin delays the others by nothing. Once the
    // turns have taken the cache's deadline for one call, the NodePools left
    // ask at once: a plugin that hangs delays the batch by at most twice that.
    let mut by_kind: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, np) in node_pools.iter().enumerate() {
        let r = &np.spec.template.spec.node_class_ref;
        by_kind
            .entry((r.group.as_str(), r.kind.as_str()))
            .or_default()
            .push(i);
    }
    let node_pools_ref = &node_pools;
    let ask = |i: usize| async move { (i, pool(ctx, &node_pools_ref[i]).await) };
    let asked = by_kind.into_values().map(|indices| async move {
        let mut answers = Vec::with_capacity(indices.len());
        let in_turn = async {
            for &i in &indices {
                answers.push(ask(i).await);
            }
        };
        let _ = tokio::time::timeout(ctx.instance_types.deadline(), in_turn).await;
        let left = indices[answers.len()..].iter().map(|&i| ask(i));
        answers.extend(futures::future::join_all(left).await);
        answers
    });
    let mut answers: Vec<_> = futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect();
    answers.sort_by_key(|(i, _)| *i);
    let answers: Vec<_> = answers.into_iter().map(|(_, a)| a).collect();
    for (np, answer) in node_pools.into_iter().zip(answers) {
        match answer {
            Ok(Some(engine)) => out.push(Pool { object: np, engine }),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(nodepool = %np.name_any(), error = format!("{e:#}"), "NodePool skipped")
            }
        }
    }
    ctx.overlays
        .apply(out.iter_mut().map(|p| &mut p.engine).collect());
    out
}

async fn pool(ctx: &Ctx, np: &NodePool) -> anyhow::Result<Option<engine::NodePool>> {
    let r = &np.spec.template.spec.node_class_ref;
    let (plugin, kind) = super::node_classes::resolve(&ctx.registry, &r.group, &r.kind)?;
    let Some((object, class)) = ctx.node_classes.get(&kind, &r.name).await? else {
        anyhow::bail!("{} {} not found", r.kind, r.name);
    };
    if object.data["status"]["conditions"].is_array() && !super::node_classes::is_ready(&object) {
        tracing::debug!(nodepool = %np.name_any(), "NodeClass not ready");
        return Ok(None);
    }
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let types = ctx.instance_types.get(&plugin, np, &class, &uid).await?;
    let mut pool = snapshot::nodepools::node_pool(np, types)?;
    ctx.unavailable
        .apply(&mut pool.instance_types, Instant::now());
    Ok(Some(pool))
}

/// The NodeClaim object for one planned claim.
pub fn node_claim(np: &NodePool, plan: &engine::Plan, claim: &engine::NewNodeClaim) -> NodeClaim {
    let pool = np.name_any();
    let template = &np.spec.template;
    let mut labels_ = template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels_.insert(labels::NODE_POOL.into(), pool.clone());
    let mut annotations = template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(
        labels::NODE_POOL_HASH.into(),
        super::hash::node_pool_hash(np),
    );
    annotations.insert(
        labels::NODE_POOL_HASH_VERSION.into(),
        super::hash::VERSION.into(),
    );
    for (key, overlays) in [
        (labels::PRICE_OVERLAY_APPLIED, &claim.price_overlays),
        (labels::CAPACITY_OVERLAY_APPLIED, &claim.capacity_overlays),
    ] {
        if !overlays.is_empty() {
            annotations.insert(key.into(), "true".into());
        }
    }
    // The NodeClaim API refuses hostname requirements (a new node has no
    // name yet) and `In` without values.
    let requirements = plan
        .node_claim_requirements(claim)
        .into_iter()
        .filter(|r| r.key != labels::HOSTNAME)
        .filter(|r| !(r.operator == engine::Operator::In && r.values.is_empty()))
        .map(|r| NodeSelectorRequirementWithMinValues {
            key: r.key,
            operator: r.operator.as_str().into(),
            values: r.values,
            min_values: r.min_values.and_then(|m| i32::try_from(m).ok()),
        })
        .collect::<Vec<_>>()
        .into();
    let requests = claim
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), Quantity(engine::format_resource(k, *v))))
        .collect();
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool}-")),
            // Created with the termination finalizer rather than given it by
            // the lifecycle controller: that would be a read and a patch per
            // NodeClaim, competing with the rest of a 1,000-claim batch.
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.into()]),
            labels: Some(labels_),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: NodePool::api_version(&()).into(),
                kind: NodePool::kind(&()).into(),
                name: pool,
                uid: np.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements,
            resources: Some(ResourceRequirements { requests }.into()),
            node_class_ref: template.spec.node_class_ref.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    }
}

/// What the batch decided, passed on: where each pod was planned (for
/// disruption's hold, launch failures and the next batch's plan), and
/// Nominated and FailedScheduling events on pods, off the batch's path. As
/// in Karpenter, a pod is nominated only to a node or NodeClaim that was
/// there before the batch: a NodeClaim the batch created for it says so
/// itself, and the scheduler binds the pod to its Node moments later.
fn publish_decisions(ctx: &Ctx, plan: &engine::Plan, created: &[Option<String>]) {
    let pods: BTreeMap<String, Arc<Pod>> = ctx
        .cluster
        .pods
        .state()
        .into_iter()
        .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
        .collect();
    // Once per batch, not per placement: 800 pods placed on 1,000 Nodes
    // would otherwise scan them all each time, cloning every name.
    let nodes: BTreeSet<String> = ctx
        .cluster
        .nodes
        .state()
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    let mut decisions = Vec::new();
    let mut nominations = Vec::new();
    let mut planned = HashMap::with_capacity(plan.placements.len());
    let now = Instant::now();
    for p in &plan.placements {
        // A CapacityBuffer's virtual pods nominate nothing: the room they
        // hold is disruption's to keep, and they are placed again each pass.
        let Some(pod) = pods.get(&p.pod.uid) else {
            continue;
        };
        match &p.target {
            engine::Target::ExistingNode(n) => {
                ctx.nominations.nominate(n, now);
                planned.insert(p.pod.uid.clone(), n.clone());
            }
            // Disruption leaves a NodeClaim alone while uninitialized, and
            // after that the pending pods headed for it are placed in every
            // simulation.
            engine::Target::NewNodeClaim(i) => {
                if let Some(name) = created.get(*i).cloned().flatten() {
                    ctx.claim_pods.add(&name, pod.as_ref(), now);
                    planned.insert(p.pod.uid.clone(), name);
                }
            }
        }
        if let Some(note) = nomination_note(&p.target, &nodes) {
            nominations.push((pod.clone(), note));
        }
    }
    ctx.nominations.plan_pods(planned);
    for u in &plan.unschedulable {
        if let Some(pod) = pods.get(&u.pod.uid) {
            decisions.push((
                pod.clone(),
                true,
                "FailedScheduling",
                format!("Failed to schedule pod, {}", u.reason),
            ));
        }
    }
    let events = ctx.events.clone();
    tokio::spawn(async move {
        for (pod, note) in nominations {
            events.nomination(pod.as_ref(), note).await;
        }
        futures::stream::iter(decisions)
            .for_each_concurrent(16, |(pod, warning, reason, note)| {
                let events = events.clone();
                async move { events.decision(pod.as_ref(), warning, reason, note).await }
            })
            .await;
    });
}

/// The note of a pod's Nominated event, if it gets one: only a placement on
/// a node or NodeClaim that was there before the batch does.
fn nomination_note(target: &engine::Target, nodes: &BTreeSet<String>) -> Option<String> {
    match target {
        engine::Target::ExistingNode(n) if nodes.contains(n) => {
            Some(format!("Pod should schedule on: node/{n}"))
        }
        engine::Target::ExistingNode(n) => Some(format!("Pod should schedule on: nodeclaim/{n}")),
        engine::Target::NewNodeClaim(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use engine::{Operator, Requirement};

    fn requirement(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    #[test]
    fn a_pod_is_nominated_only_to_what_was_there_before_the_batch() {
        let nodes = BTreeSet::from(["node-a".to_string()]);
        let note = |t| nomination_note(&t, &nodes);
        assert_eq!(
            note(engine::Target::ExistingNode("node-a".into())).as_deref(),
            Some("Pod should schedule on: node/node-a")
        );
        assert_eq!(
            note(engine::Target::ExistingNode("default-x7k2p".into())).as_deref(),
            Some("Pod should schedule on: nodeclaim/default-x7k2p"),
            "an in-flight NodeClaim with no Node yet"
        );
        assert_eq!(
            note(engine::Target::NewNodeClaim(0)),
            None,
            "a NodeClaim the batch creates says so itself"
        );
    }

    #[test]
    fn a_planned_claim_becomes_the_node_claim_the_api_accepts() {
        let np: NodePool = fixtures::node_pool("default").build();
        let planned = engine::NewNodeClaim {
            node_pool: "default".into(),
            requirements: vec![
                requirement(labels::ZONE, Operator::In, &["z-1"]),
                requirement(labels::HOSTNAME, Operator::In, &["pod-affinity-target"]),
                requirement("example.com/empty", Operator::In, &[]),
                requirement(labels::CAPACITY_TYPE, Operator::In, &["on-demand"]),
            ],
            instance_types: vec![1, 0],
            instance_type_min_values: Some(2),
            requests: [("cpu".to_string(), 1500), ("memory".to_string(), 1 << 30)]
                .into_iter()
                .collect(),
            cheapest: None,
            pods: vec![],
            price_overlays: vec!["cheap-spot".into()],
            capacity_overlays: vec![],
        };
        let plan = engine::Plan {
            new_node_claims: vec![planned.clone()],
            instance_types: vec!["m-4".into(), "m-2".into()],
            ..Default::default()
        };
        let nc = node_claim(&np, &plan, &planned);
        let meta = &nc.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("default-"));
        assert_eq!(
            meta.finalizers.as_deref(),
            Some(&[labels::TERMINATION_FINALIZER.to_string()][..]),
            "created with the finalizer, so no patch adds it"
        );
        let labels_ = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels_.get("team").map(String::as_str), Some("web"));
        assert_eq!(
            labels_.get(labels::NODE_POOL).map(String::as_str),
            Some("default")
        );
        let annotations = meta.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get("example.com/owner").map(String::as_str),
            Some("web")
        );
        assert!(
            annotations.contains_key(labels::NODE_POOL_HASH),
            "drift compares it"
        );
        assert_eq!(
            annotations
                .get(labels::PRICE_OVERLAY_APPLIED)
                .map(String::as_str),
            Some("true")
        );
        assert!(!annotations.contains_key(labels::CAPACITY_OVERLAY_APPLIED));
        let owner = &meta.owner_references.as_deref().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("NodePool", "default")
        );
        assert_eq!(Some(&owner.uid), np.metadata.uid.as_ref());

        let reqs: Vec<(String, String, Vec<String>, Option<i32>)> = nc
            .spec
            .requirements
            .iter()
            .map(|r| {
                (
                    r.key.clone(),
                    r.operator.clone(),
                    r.values.clone(),
                    r.min_values,
                )
            })
            .collect();
        let own = |k: &str, v: &[&str]| {
            (
                k.to_string(),
                "In".to_string(),
                v.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                None,
            )
        };
        assert_eq!(
            reqs,
            [
                own(labels::CAPACITY_TYPE, &["on-demand"]),
                (
                    labels::INSTANCE_TYPE.to_string(),
                    "In".to_string(),
                    vec!["m-2".into(), "m-4".into()],
                    Some(2)
                ),
                own(labels::ZONE, &["z-1"]),
            ],
            "no hostname, no empty In; instance types cheapest first with their minValues"
        );
        let requests = nc
            .spec
            .resources
            .as_ref()
            .map(|r| r.requests.clone())
            .unwrap_or_default();
        assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("1500m"));
        assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
        assert_eq!(nc.spec.taints, np.spec.template.spec.taints);
        assert_eq!(nc.spec.startup_taints, np.spec.template.spec.startup_taints);
        assert_eq!(nc.spec.expire_after.as_deref(), Some("720h"));
        assert_eq!(nc.spec.node_class_ref.name, "default");
    }
}
