//! Drift: replace nodes that no longer match their NodePool (hash or
//! requirements) or that the provider says drifted, oldest drift first.
//! Empty drifted nodes go together; otherwise the first whose pods all find a
//! place goes, with whatever NodeClaims that takes. Its pods pass over nodes
//! still initializing, so commands follow each other without waiting for the
//! previous replacement. No price test: drift is about correctness, not
//! savings.
//!
//! A static NodePool's drifted node is replaced by a NodeClaim from the
//! NodePool's template, made before the node goes, with no simulation (its
//! pods go wherever they fit, as they would on a scale-down): one per
//! budget, only while the NodePool is not above its replicas and only if
//! the replacement fits its node limit, as Karpenter's static drift does.

use crate::plan::{NewNodeClaim, Plan};

use super::Draft;
use super::budgets::{self, Budgets};
use super::candidates::Candidate;
use super::cluster::Cluster;
use super::notes::Notes;
use super::plan::{KeepKind, Method};
use super::simulation::{Outcome, Simulator};
use super::snapshot::DisruptionReason;

pub(crate) fn run(
    c: &Cluster,
    cands: &[Candidate],
    sim: &Simulator,
    mut budgets: Budgets,
    notes: &mut Notes,
) -> Option<Draft> {
    let reason = DisruptionReason::Drifted;
    let drifted = drifted_oldest_first(c, cands, false);

    let mut empty = Vec::new();
    let mut price = 0.0;
    for &i in drifted.iter().filter(|&&i| cands[i].reschedulable == 0) {
        let cand = &cands[i];
        if budgets.take(cand.pool, reason) {
            empty.push(cand.node);
            price += cand.price.clone().unwrap_or(0.0);
        } else {
            notes.say(
                cand.node,
                KeepKind::DisruptionBlocked,
                budgets::blocked_message(reason),
            );
        }
    }
    if !empty.is_empty() {
        return Some(Draft {
            method: Method::Drift,
            reason,
            nodes: empty,
            replacements: Plan::default(),
            candidates_price: price,
            replacements_price: 0.0,
        });
    }

    for &i in drifted.iter().filter(|&&i| cands[i].reschedulable > 0) {
        let cand = &cands[i];
        if budgets.left(cand.pool, reason) == 0 {
            notes.say(
                cand.node,
                KeepKind::DisruptionBlocked,
                budgets::blocked_message(reason),
            );
            continue;
        }
        match sim.simulate_replacing(&[cand.node]) {
            Outcome::Stuck(why) => notes.say(cand.node, KeepKind::DisruptionBlocked, why),
            Outcome::Placed(run) => {
                let replacements = run.into_plan();
                let replacements_price = replacements.total_price_per_hour();
                return Some(Draft {
                    method: Method::Drift,
                    reason,
                    nodes: vec![cand.node],
                    replacements,
                    candidates_price: cand.price.clone().unwrap_or(0.0),
                    replacements_price,
                });
            }
        }
    }
    static_pools(c, cands, budgets, notes)
}

/// The drifted candidates of static NodePools or of the others, longest
/// drifted first.
fn drifted_oldest_first(c: &Cluster, cands: &[Candidate], in_static_pool: bool) -> Vec<usize> {
    let mut drifted: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].drift.is_some() && cands[i].in_static_pool == in_static_pool)
        .collect();
    let since = |i: usize| {
        let n = c.nodes[cands[i].node].node;
        n.drifted_since.unwrap_or(n.created)
    };
    drifted.sort_by_key(|&i| (since(i), cands[i].node));
    drifted
}

fn static_pools(
    c: &Cluster,
    cands: &[Candidate],
    mut budgets: Budgets,
    notes: &mut Notes,
) -> Option<Draft> {
    let reason = DisruptionReason::Drifted;
    for i in drifted_oldest_first(c, cands, true) {
        let cand = &cands[i];
        let pool = &c.pools[cand.pool].spec.pool;
        let replicas = i64::from(pool.replicas.unwrap_or(0));
        let of_pool = || c.nodes.iter().filter(|n| n.pool == Some(cand.pool));
        let running = of_pool().filter(|n| !n.node.deleting).count() as i64;
        // Nodes still going count against the limit until they are gone.
        let existing = of_pool().count() as i64;
        if running > replicas {
            notes.say(
                cand.node,
                KeepKind::DisruptionBlocked,
                format!("static NodePool has {running} nodes for {replicas} replicas and is scaling down"),
            );
            continue;
        }
        if pool
            .limits
            .get(vocabulary::resources::NODES)
            .is_some_and(|&limit| existing + 1 > limit)
        {
            notes.say(
                cand.node,
                KeepKind::DisruptionBlocked,
                "static NodePool is at its node limit and cannot stage a replacement".to_string(),
            );
            continue;
        }
        if !budgets.take(cand.pool, reason) {
            notes.say(
                cand.node,
                KeepKind::DisruptionBlocked,
                budgets::blocked_message(reason),
            );
            continue;
        }
        // What the static NodePool creates from its template: the plugin
        // picks the type within its requirements.
        let template = NewNodeClaim {
            node_pool: pool.name.clone(),
            requirements: pool.requirements.clone(),
            instance_types: Vec::new(),
            instance_type_min_values: None,
            requests: Default::default(),
            cheapest: None,
            pods: Vec::new(),
            price_overlays: Vec::new(),
            capacity_overlays: Vec::new(),
        };
        return Some(Draft {
            method: Method::Drift,
            reason,
            nodes: vec![cand.node],
            replacements: Plan {
                new_node_claims: vec![template],
                ..Plan::default()
            },
            candidates_price: cand.price.clone().unwrap_or(0.0),
            replacements_price: 0.0,
        });
    }
    None
}
