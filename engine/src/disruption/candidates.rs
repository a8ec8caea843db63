//! Candidates: managed nodes that may be disrupted at all, with what every
//! method needs to know about them (price, disruption cost, drift,
//! consolidateAfter). The rest get Karpenter's DisruptionBlocked reason.

use crate::snapshot::{Labels, NodePool, Operator, Requirement};
use vocabulary::labels::{CAPACITY_TYPE, INSTANCE_TYPE, WELL_KNOWN, ZONE};

use super::cluster::{Cluster, NodeView, PoolView, ms};
use super::duration;
use super::notes::Notes;
use super::pdb;
use super::plan::{KeepKind, KeepReason};
use super::snapshot::{ClusterNode, NodePod};

pub(crate) const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";

#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// Index into [`Cluster::nodes`].
    pub(crate) node: usize,
    /// Index into [`Cluster::pools`].
    pub(crate) pool: usize,
    pub(crate) instance_type: String,
    pub(crate) capacity_type: String,
    /// $/hour of its offering, or why it is unknown.
    pub(crate) price: Result<f64, String>,
    /// Sum of its pods' eviction costs, scaled by the lifetime it has left.
    pub(crate) disruption_cost: f64,
    /// 1 + the positive eviction costs of the pods that would move: the
    /// consolidation order's and the Balanced policy's measure.
    pub(crate) move_cost: f64,
    pub(crate) reschedulable: usize,
    /// Why it drifted, if it did.
    pub(crate) drift: Option<String>,
    /// Whether consolidateAfter has passed (and consolidation is on).
    pub(crate) consolidatable: Result<(), KeepReason>,
    /// Of a static NodePool: only drift replaces it, with a NodeClaim from
    /// the template, never consolidation.
    pub(crate) in_static_pool: bool,
}

impl Candidate {
    /// The order consolidation and emptiness try candidates in, Karpenter's:
    /// the most dollars saved per pod moved first, a node counting as one
    /// pod more than it holds, so a nearly empty small node does not come
    /// before a large one; unknown prices last.
    pub(crate) fn order_key(&self) -> f64 {
        match self.price {
            Ok(p) if p > 0.0 => self.move_cost / p,
            _ => f64::INFINITY,
        }
    }
}

/// Sorts candidate indexes by [`Candidate::order_key`], then disruption cost,
/// then node (names are sorted already).
pub(crate) fn sort_for_consolidation(cands: &[Candidate], list: &mut [usize]) {
    list.sort_by(|&a, &b| {
        let (x, y) = (&cands[a], &cands[b]);
        x.order_key()
            .total_cmp(&y.order_key())
            .then(x.disruption_cost.total_cmp(&y.disruption_cost))
            .then(x.node.cmp(&y.node))
    });
}

fn blocked(message: impl Into<String>) -> KeepReason {
    KeepReason {
        kind: KeepKind::DisruptionBlocked,
        message: message.into(),
    }
}

/// Candidates in node order. Managed nodes that are not candidates (expired
/// ones aside) get their reason in `notes`.
pub(crate) fn collect(c: &Cluster, expired: &[bool], notes: &mut Notes) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let Some(name) = n.node.node_pool.as_deref() else {
            continue;
        };
        if expired.get(i).copied().unwrap_or(false) {
            continue;
        }
        let Some(pool) = n.pool else {
            notes.add(i, blocked(format!("Owning nodepool {name:?} not found")));
            continue;
        };
        let in_static_pool = c.pools[pool].spec.pool.replicas.is_some();
        let not_consolidated = || {
            blocked(format!(
                "NodePool {name:?} is static: it keeps its replicas, and its nodes are not consolidated"
            ))
        };
        if in_static_pool && drift(&c.pools[pool], n.node).is_none() {
            notes.add(i, not_consolidated());
            continue;
        }
        if let Err(why) = validate(c, n) {
            notes.add(i, why);
            continue;
        }
        let mut cand = candidate(c, i, pool);
        if in_static_pool {
            cand.in_static_pool = true;
            cand.consolidatable = Err(not_consolidated());
        }
        out.push(cand);
    }
    out
}

/// Karpenter's checks, in its order, with its words. A node still on its
/// way up, or just nominated for a pending pod, is not blocked, only not a
/// candidate yet: Waiting, so no event is published for each step of every
/// launch.
fn validate(c: &Cluster, n: &NodeView) -> Result<(), KeepReason> {
    let waiting = |message: &str| KeepReason {
        kind: KeepKind::Waiting,
        message: message.into(),
    };
    let node = n.node;
    if node.in_flight {
        return Err(waiting("Nodeclaim does not have an associated node"));
    }
    if !node.initialized {
        return Err(waiting("Node isn't initialized"));
    }
    if node.deleting {
        return Err(blocked("Node is deleting or marked for deletion"));
    }
    if node.nominated {
        return Err(waiting("Node is nominated for a pending pod"));
    }
    if node_protected(c, node) {
        return Err(blocked(format!(
            "Disruption is blocked through the {DO_NOT_DISRUPT:?} annotation"
        )));
    }
    if let Some(p) = n.active().find(|p| pod_protected(c, p)) {
        return Err(blocked(format!(
            "Pod \"{}/{}\" has {DO_NOT_DISRUPT:?} annotation",
            p.pod.namespace, p.pod.name
        )));
    }
    if let Some(why) = pdb::blocking(&c.pdbs, &n.pods) {
        return Err(blocked(why));
    }
    Ok(())
}

/// "true", or a positive duration not yet elapsed since `since` (always
/// protected when `since` is unknown). Anything else is ignored, as Karpenter
/// ignores a malformed annotation.
fn protected(value: Option<&str>, since: Option<i64>, now_ms: i64) -> bool {
    match value {
        None => false,
        Some("true") => true,
        Some(v) => match duration::parse(v) {
            Ok(d) if d > 0 => since.is_none_or(|s| now_ms.saturating_sub(ms(s)) < d),
            _ => false,
        },
    }
}

fn node_protected(c: &Cluster, node: &ClusterNode) -> bool {
    protected(
        node.do_not_disrupt.as_deref(),
        Some(node.created),
        c.now_ms(),
    )
}

pub(crate) fn pod_protected(c: &Cluster, p: &NodePod) -> bool {
    protected(p.do_not_disrupt.as_deref(), p.start_time, c.now_ms())
}

/// 1 + deletion cost / 2^27 + priority / 2^25, clamped to [-10, 10].
pub(crate) fn eviction_cost(p: &NodePod) -> f64 {
    let mut cost = 1.0;
    if let Some(dc) = p
        .deletion_cost
        .as_deref()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|d| d.is_finite())
    {
        cost += dc / f64::from(1u32 << 27);
    }
    cost += f64::from(p.pod.priority) / f64::from(1u32 << 25);
    cost.clamp(-10.0, 10.0)
}

/// The share of its lifetime (expireAfter) a node has left, in [0, 1].
fn lifetime_remaining(c: &Cluster, node: &NodeView) -> f64 {
    match node.expire_after {
        Some(total) => {
            let age = c.now_ms().saturating_sub(ms(node.node.created));
            ((total - age) as f64 / total as f64).clamp(0.0, 1.0)
        }
        None => 1.0,
    }
}

fn candidate(c: &Cluster, i: usize, pool_index: usize) -> Candidate {
    let n = &c.nodes[i];
    let node = n.node;
    let pool = &c.pools[pool_index];
    let label = |k: &str| node.labels.get(k).cloned().unwrap_or_default();
    let rescheduling: f64 = n.pods.iter().map(|p| eviction_cost(p)).sum();
    let move_cost = 1.0
        + n.reschedulable()
            .map(|p| eviction_cost(p).max(0.0))
            .sum::<f64>();
    Candidate {
        node: i,
        pool: pool_index,
        instance_type: label(INSTANCE_TYPE),
        capacity_type: label(CAPACITY_TYPE),
        price: node_price(&pool.spec.pool, &node.labels),
        disruption_cost: rescheduling * lifetime_remaining(c, n),
        move_cost,
        reschedulable: n.reschedulable().count(),
        drift: drift(pool, node),
        consolidatable: consolidatable(c, pool, node),
        in_static_pool: false,
    }
}

/// The cheapest offering of the node's instance type in its zone and capacity
/// type, available or not (it is the one the node runs on).
pub(crate) fn node_price(pool: &NodePool, labels: &Labels) -> Result<f64, String> {
    let get = |k: &str| {
        labels
            .get(k)
            .ok_or_else(|| format!("Required label {k:?} doesn't exist"))
    };
    let (it, zone, ct) = (get(INSTANCE_TYPE)?, get(ZONE)?, get(CAPACITY_TYPE)?);
    let ty = pool
        .instance_types
        .iter()
        .find(|t| &t.name == it)
        .ok_or_else(|| format!("Instance type {it:?} not found"))?;
    ty.offerings
        .iter()
        .filter(|o| &o.capacity_type == ct && o.zone.as_ref().is_none_or(|z| z == zone))
        .map(|o| o.price)
        .filter(|p| p.is_finite())
        .min_by(f64::total_cmp)
        .ok_or_else(|| {
            format!(
                "Instance type {it:?} has no offering in zone {zone:?} with capacity type {ct:?}"
            )
        })
}

/// NodePool hash first, then the NodePool's requirements, then the provider.
fn drift(pool: &PoolView, node: &ClusterNode) -> Option<String> {
    if node.node_pool_hash_drifted {
        return Some("NodePoolDrifted".into());
    }
    if pool
        .spec
        .pool
        .requirements
        .iter()
        .any(|r| !satisfied(r, &node.labels))
    {
        return Some("RequirementsDrifted".into());
    }
    node.provider_drift.clone().filter(|r| !r.is_empty())
}

/// Whether a node's labels still meet a NodePool requirement. A well-known
/// label the node lacks is not held against it.
fn satisfied(r: &Requirement, labels: &Labels) -> bool {
    let value = labels.get(r.key.as_str());
    let number = || value.and_then(|v| v.parse::<i64>().ok());
    let bound = || r.values.first().and_then(|v| v.parse::<i64>().ok());
    if value.is_none() && WELL_KNOWN.contains(&r.key.as_str()) {
        return true;
    }
    match r.operator {
        Operator::In => value.is_some_and(|v| r.values.contains(v)),
        Operator::NotIn => value.is_none_or(|v| !r.values.contains(v)),
        Operator::Exists => value.is_some(),
        Operator::DoesNotExist => value.is_none(),
        Operator::Gt => number().zip(bound()).is_some_and(|(v, b)| v > b),
        Operator::Lt => number().zip(bound()).is_some_and(|(v, b)| v < b),
        Operator::Gte => number().zip(bound()).is_some_and(|(v, b)| v >= b),
        Operator::Lte => number().zip(bound()).is_some_and(|(v, b)| v <= b),
    }
}

/// consolidateAfter: counted from the last pod event, else from initialization.
fn consolidatable(c: &Cluster, pool: &PoolView, node: &ClusterNode) -> Result<(), KeepReason> {
    let unconsolidatable = |message: String| KeepReason {
        kind: KeepKind::Unconsolidatable,
        message,
    };
    let after = match &pool.consolidate_after {
        Ok(Some(d)) => *d,
        // The pool's own setting, not news about the node: no event.
        Ok(None) => {
            return Err(KeepReason {
                kind: KeepKind::Waiting,
                message: format!("NodePool {:?} has consolidation disabled", pool.name()),
            });
        }
        Err(why) => {
            return Err(unconsolidatable(format!(
                "NodePool {:?} has consolidation disabled: consolidateAfter is {why}",
                pool.name()
            )));
        }
    };
    let since = node
        .last_pod_event
        .or(node.initialized_at)
        .unwrap_or(node.created);
    let ready_at = ms(since).saturating_add(after);
    if c.now_ms() < ready_at {
        return Err(KeepReason {
            kind: KeepKind::Waiting,
            message: format!(
                "Not consolidatable until consolidateAfter ({}) has passed since the last pod event, in {}s",
                pool.spec.consolidate_after.trim(),
                (ready_at - c.now_ms() + 999).div_euclid(1000)
            ),
        });
    }
    Ok(())
}
