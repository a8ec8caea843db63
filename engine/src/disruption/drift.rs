//! Drift: replace nodes that no longer match their NodePool (hash or
//! requirements) or that the provider says drifted, oldest drift first.
//! Empty drifted nodes go together; otherwise the first whose pods all find a
//! place goes, with whatever NodeClaims that takes. Its pods pass over nodes
//! still initializing, so commands follow each other without waiting for the
//! previous replacement. No price test: drift is about correctness, not
//! savings.

use crate::plan::Plan;

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
    let mut drifted: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].drift.is_some())
        .collect();
    let since = |i: usize| {
        let n = c.nodes[cands[i].node].node;
        n.drifted_since.unwrap_or(n.created)
    };
    drifted.sort_by_key(|&i| (since(i), cands[i].node));

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
    None
}
