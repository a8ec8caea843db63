//! Emptiness: delete every consolidatable candidate with no pod to move, as
//! far as the Empty budgets allow. Runs for every consolidation policy.

use crate::plan::Plan;

use super::Draft;
use super::budgets::{self, Budgets};
use super::candidates::{Candidate, sort_for_consolidation};
use super::notes::Notes;
use super::plan::{KeepKind, Method};
use super::snapshot::DisruptionReason;

pub(crate) fn run(cands: &[Candidate], mut budgets: Budgets, notes: &mut Notes) -> Option<Draft> {
    let reason = DisruptionReason::Empty;
    let mut empty: Vec<usize> = (0..cands.len())
        .filter(|&i| cands[i].reschedulable == 0)
        .collect();
    sort_for_consolidation(cands, &mut empty);
    let mut nodes = Vec::new();
    let mut price = 0.0;
    for i in empty {
        let c = &cands[i];
        if let Err(why) = &c.consolidatable {
            notes.add(c.node, why.clone());
            continue;
        }
        if !budgets.take(c.pool, reason) {
            notes.say(
                c.node,
                KeepKind::DisruptionBlocked,
                budgets::blocked_message(reason),
            );
            continue;
        }
        nodes.push(c.node);
        price += c.price.clone().unwrap_or(0.0);
    }
    if nodes.is_empty() {
        return None;
    }
    Some(Draft {
        method: Method::Emptiness,
        reason,
        nodes,
        replacements: Plan::default(),
        candidates_price: price,
        replacements_price: 0.0,
    })
}
