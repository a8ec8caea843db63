//! The disruption engine: given a [`DisruptionSnapshot`] (the cluster, the
//! NodePools' disruption settings, PDBs and the time), decide which nodes to
//! remove or replace now, the way Karpenter's disruption controller does on
//! each 10-second pass, and say why every other node stays.
//!
//! Methods run in Karpenter's order and the first that finds a command wins:
//! `emptiness`, `drift`, `multi_node` then `single_node` consolidation (both
//! built on `consolidation`). Before them, `candidates` sorts out which nodes may be
//! disrupted at all and `budgets` how many per NodePool and reason; `expiration`
//! is its own forceful list, and `repair` (unhealthy nodes, from the
//! provider's repair policies) its own decision, as is `interruption` (nodes
//! the cloud announced it will take). Simulations (`simulation`) run the provisioning
//! scheduler with nodes removed. `cron` and `duration` read budget schedules
//! and Go durations; `pdb` reads PodDisruptionBudgets; `buffers` binds
//! CapacityBuffers' virtual pods to the room they hold before any of it.
//!
//! Architecture Invariant: pure like the rest of the engine. `now` is an input
//! (Unix seconds); the same snapshot gives the same plan byte for byte,
//! whatever the order of its collections (`cluster` sorts them first).
//!
//! Architecture Invariant: a command never exceeds a budget, never includes a
//! node with a do-not-disrupt node or pod, or a pod a PDB protects, and never
//! evicts a pod that has no place on the remaining nodes or replacements.
//! Consolidation replacements are cheaper than what they replace.

mod budgets;
mod buffers;
mod candidates;
mod cluster;
mod consolidation;
mod cron;
mod drift;
mod duration;
mod emptiness;
mod expiration;
pub mod interruption;
mod multi_node;
mod notes;
mod pdb;
pub mod plan;
pub mod repair;
mod simulation;
mod single_node;
pub mod snapshot;
mod validation;

pub(crate) use candidates::node_price;
pub use plan::{Command, DisruptionPlan, KeepKind, KeepReason, KeptNode, Method, PoolBudget};
pub use snapshot::{
    Budget, ClusterNode, ConsolidationPolicy, DisruptionNodePool, DisruptionOptions,
    DisruptionReason, DisruptionSnapshot, NodePod, PodDisruptionBudget,
};
pub use validation::validate;

use crate::plan::Plan;

use budgets::Budgets;
use cluster::Cluster;
use consolidation::Ctx;
use notes::Notes;
use simulation::{Inputs, Simulator};

/// A command before it is written out: nodes as indexes into [`Cluster::nodes`].
pub(crate) struct Draft {
    pub(crate) method: Method,
    pub(crate) reason: DisruptionReason,
    pub(crate) nodes: Vec<usize>,
    pub(crate) replacements: Plan,
    pub(crate) candidates_price: f64,
    pub(crate) replacements_price: f64,
}

/// The methods that simulate: drift, then multi- and single-node
/// consolidation. The cluster is prepared for scheduling once, here, since
/// emptiness does without.
fn simulated(
    c: &Cluster,
    cands: &[candidates::Candidate],
    expired: &[bool],
    budgets: &Budgets,
    notes: &mut Notes,
) -> Option<Draft> {
    // Only drifted candidates and those consolidation looks at are ever
    // simulated away. The others' pods need no place prepared, and with no
    // such candidate (consolidateAfter not passed, or Never, and nothing
    // drifted) nothing is prepared: at 10,000 pods that is megabytes and
    // most of a pass.
    let moving: Vec<usize> = cands
        .iter()
        .filter(|x| x.drift.is_some() || consolidation::considers(c, x))
        .map(|x| x.node)
        .collect();
    if moving.is_empty() {
        // What the methods would say without simulating: why each stays.
        consolidation::eligible(c, cands, notes);
        return None;
    }
    let inputs = Inputs::new(c, &moving, expired);
    let prepared = inputs.prepare(c);
    let sim = Simulator::new(&inputs, &prepared, c.nodes.len());
    drift::run(c, cands, &sim, budgets.clone(), notes).or_else(|| {
        let ctx = Ctx::new(c, cands, &sim);
        let eligible = ctx.eligible(notes);
        multi_node::run(&ctx, &eligible, budgets.clone())
            .or_else(|| single_node::run(&ctx, &eligible, budgets, notes))
    })
}

/// A draft as the command it is, its nodes by name.
fn written(c: &Cluster, d: Draft) -> Command {
    let mut candidates: Vec<String> = d
        .nodes
        .iter()
        .map(|&n| c.nodes[n].name().to_string())
        .collect();
    candidates.sort();
    Command {
        method: d.method,
        reason: d.reason,
        candidates,
        replacements: d.replacements,
        candidates_price: d.candidates_price,
        replacements_price: d.replacements_price,
        savings: d.candidates_price - d.replacements_price,
    }
}

/// Decides this round's disruption. Pure: same snapshot, same plan.
pub fn disrupt(snapshot: &DisruptionSnapshot) -> DisruptionPlan {
    match buffers::settle(snapshot) {
        Some(settled) => decide(&settled),
        None => decide(snapshot),
    }
}

fn decide(snapshot: &DisruptionSnapshot) -> DisruptionPlan {
    let c = Cluster::new(snapshot);
    let expired = expiration::expired(&c);
    let mut notes = Notes::new(c.nodes.len());
    let cands = candidates::collect(&c, &expired, &mut notes);
    let budgets = Budgets::new(&c, &expired);

    let draft = emptiness::run(&cands, budgets.clone(), &mut notes)
        .or_else(|| simulated(&c, &cands, &expired, &budgets, &mut notes));

    let mut in_command = vec![false; c.nodes.len()];
    for &n in draft.iter().flat_map(|d| &d.nodes) {
        in_command[n] = true;
    }
    let mut kept = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        let Some(pool) = n.node.node_pool.as_deref() else {
            continue;
        };
        if in_command[i] || expired[i] {
            continue;
        }
        let mut reasons = notes.take(i);
        reasons.extend(buffers::held(n));
        if reasons.is_empty() {
            let message = match &draft {
                Some(d) => format!(
                    "Another command came first this round: {}",
                    d.method.as_str()
                ),
                None => "Nothing to disrupt".to_string(),
            };
            reasons.push(plan::KeepReason {
                kind: KeepKind::Waiting,
                message,
            });
        }
        kept.push(KeptNode {
            name: n.name().to_string(),
            node_pool: pool.to_string(),
            reasons,
        });
    }
    let command = draft.map(|d| written(&c, d));
    DisruptionPlan {
        command,
        expired: c
            .nodes
            .iter()
            .zip(&expired)
            .filter(|(_, e)| **e)
            .map(|(n, _)| n.name().to_string())
            .collect(),
        kept,
        budgets: budgets.report(&c),
    }
}
