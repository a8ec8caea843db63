//! The provisioning scheduler: places pending pods on existing nodes and on
//! new NodeClaims, the way Karpenter's provisioner does.
//!
//! Read in this order: `prepare` (the compiled snapshot), `run` (the queue
//! loop over some pods, and its plan), `class` (a pod with its preferences
//! relaxed so far), `state` (trying and committing placements), `topology`
//! (spread and pod (anti-)affinity counts), `masks` (instance-type bitsets),
//! `output` and `explain` (the plan's NodeClaims and reasons).

mod class;
mod explain;
mod masks;
mod order;
mod output;
pub(crate) mod prepare;
mod reservations;
pub(crate) mod run;
pub(crate) mod state;
mod topology;

use crate::plan::Plan;
use crate::snapshot::Snapshot;

pub use prepare::Prepared;

/// Schedules the snapshot's pending pods. Same input, same plan, whatever the
/// order of its collections.
pub fn schedule(snapshot: &Snapshot) -> Plan {
    schedule_prepared(&Prepared::new(snapshot))
}

/// Schedules an already prepared snapshot (prepare once, schedule many times).
pub fn schedule_prepared(p: &Prepared) -> Plan {
    run::Run::new(p, &[], (0..p.pods.len() as u32).collect()).into_plan()
}
