//! Validation: a consolidation or emptiness command waits a while before it
//! acts (Karpenter's 15 seconds), and then acts only if it still holds on
//! the cluster as it is now: each of its nodes still a candidate, within
//! its budget; an emptiness command's nodes still empty; a consolidation's
//! pods still placed, with no more new NodeClaims than it planned and still
//! cheaper. A better command found meanwhile does not undo it: while pods
//! come and go, the same decision twice in a row may never come.

use super::budgets::{self, Budgets};
use super::cluster::Cluster;
use super::consolidation::{self, Ctx};
use super::notes::Notes;
use super::plan::{Command, Method};
use super::simulation::{Inputs, Simulator};
use super::snapshot::DisruptionSnapshot;
use super::{Draft, buffers, candidates, expiration, written};
use crate::plan::Plan;

/// `command`, decided on an earlier snapshot, as it would act on this one
/// (its replacements planned afresh), or why it no longer holds.
pub fn validate(snapshot: &DisruptionSnapshot, command: &Command) -> Result<Command, String> {
    match buffers::settle(snapshot) {
        Some(settled) => check(&settled, command),
        None => check(snapshot, command),
    }
}

fn check(snapshot: &DisruptionSnapshot, command: &Command) -> Result<Command, String> {
    let c = Cluster::new(snapshot);
    let expired = expiration::expired(&c);
    let mut notes = Notes::new(c.nodes.len());
    let cands = candidates::collect(&c, &expired, &mut notes);
    let mut budgets = Budgets::new(&c, &expired);
    let mut picked = Vec::new();
    for name in &command.candidates {
        let Some(node) = c.nodes.iter().position(|n| n.name() == name) else {
            return Err(format!("node {name} is gone"));
        };
        let Some(i) = cands.iter().position(|x| x.node == node) else {
            let why = notes.take(node).into_iter().next().map(|r| r.message);
            return Err(format!(
                "node {name}: {}",
                why.as_deref().unwrap_or("no longer a candidate")
            ));
        };
        if let Err(why) = &cands[i].consolidatable {
            return Err(format!("node {name}: {}", why.message));
        }
        if !budgets.take(cands[i].pool, command.reason) {
            return Err(format!(
                "node {name}: {}",
                budgets::blocked_message(command.reason)
            ));
        }
        picked.push(i);
    }
    // The methods' order, so that prices add up in the same order too.
    candidates::sort_for_consolidation(&cands, &mut picked);
    let draft = match command.method {
        Method::Emptiness => {
            if let Some(&i) = picked.iter().find(|&&i| cands[i].reschedulable > 0) {
                return Err(format!(
                    "node {} is no longer empty",
                    c.nodes[cands[i].node].name()
                ));
            }
            Draft {
                method: Method::Emptiness,
                reason: command.reason,
                nodes: picked.iter().map(|&i| cands[i].node).collect(),
                replacements: Plan::default(),
                candidates_price: picked
                    .iter()
                    .map(|&i| cands[i].price.clone().unwrap_or(0.0))
                    .sum(),
                replacements_price: 0.0,
            }
        }
        Method::SingleNodeConsolidation | Method::MultiNodeConsolidation => {
            if let Some(&i) = picked
                .iter()
                .find(|&&i| !consolidation::considers(&c, &cands[i]))
            {
                return Err(format!(
                    "node {} is no longer consolidatable",
                    c.nodes[cands[i].node].name()
                ));
            }
            let moving: Vec<usize> = picked.iter().map(|&i| cands[i].node).collect();
            let inputs = Inputs::new(&c, &moving, &expired);
            let prepared = inputs.prepare(&c);
            let sim = Simulator::new(&inputs, &prepared, c.nodes.len());
            let ctx = Ctx::new(&c, &cands, &sim);
            let draft = consolidation::compute(&ctx, &picked, command.method)?;
            let (now, planned) = (
                draft.replacements.new_node_claims.len(),
                command.replacements.new_node_claims.len(),
            );
            if now > planned {
                return Err(format!(
                    "it would now need {now} new NodeClaims, not {planned}"
                ));
            }
            draft
        }
        Method::Drift => return Err("a drift command is not validated".into()),
    };
    Ok(written(&c, draft))
}
