//! What-if: a decision's effect on the cluster, without a cluster. The
//! provisioner's plan and each disruption command are carried out on a
//! `DisruptionSnapshot` (planned NodeClaims become initialized nodes, pods
//! move where the plan placed them, candidates go), and disruption is
//! decided again on the result until nothing more would change. `karpenter
//! simulate` shows the difference.
//!
//! Pure like the rest of the engine: every launch happens at the snapshot's
//! `now`, and a new node is named `<nodepool>-new-<n>`.

mod apply;
mod diff;
mod settle;

pub use apply::{Launched, execute, provision};
pub use diff::{Diff, NodeChange, PoolCost, diff, node_price};
pub use settle::{Settled, Step, scheduling_view, settle};
