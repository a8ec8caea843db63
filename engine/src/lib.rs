//! The pure provisioning engine: given a [`Snapshot`] of the cluster (NodePools
//! with their instance types, existing nodes, daemonsets, pending pods), return
//! a [`Plan`]: which pods go on which existing node, which new NodeClaims to
//! create, and why the rest cannot be scheduled.
//!
//! # Using it
//! - Build a [`Snapshot`] (plain serde data; quantities via [`quantity`]).
//! - Call [`schedule`], or [`Prepared::new`] once and [`schedule_prepared`]
//!   many times (for example to simulate removing nodes during disruption:
//!   prepare a snapshot without those nodes and with their pods pending).
//! - Read [`Plan`]; [`Plan::total_price_per_hour`] sums the cheapest offerings.
//! - [`bench::scheduling_snapshot`] reproduces Karpenter's scheduling benchmark.
//!
//! # Where to start reading
//! `snapshot` and `plan` (the API), then `scheduler` (its module doc lists the
//! order). The label algebra is `requirements`; `selector`, `taints` and
//! `resources` are small helpers.
//!
//! # Invariants
//! Architecture Invariant: no I/O, no clock, no randomness, no async. The engine
//! depends on serde alone; the host translates Kubernetes objects to a
//! `Snapshot`.
//!
//! Architecture Invariant: the plan is a function of the snapshot's contents,
//! not of the order of its collections. Inputs are sorted canonically before
//! anything is interned, hash maps use a fixed hasher and never feed output
//! through their iteration order.
//!
//! Architecture Invariant: Karpenter's behaviour is the reference: pods in
//! CPU, memory, creation, uid order; existing nodes (initialized first) before
//! new NodeClaims (fewest pods first) before a new NodeClaim per NodePool
//! (weight, then name); preferences relaxed one at a time in Karpenter's order.

pub mod bench;
pub mod labels;
mod map;
pub mod plan;
pub mod quantity;
pub mod snapshot;

mod bitset;
mod intern;
mod requirements;
mod resources;
mod scheduler;
mod selector;
mod taints;

pub use plan::{NewNodeClaim, OfferingChoice, Placement, Plan, PodRef, Target, Unschedulable};
pub use quantity::{Quantity, QuantityError, parse_resource};
pub use scheduler::{Prepared, schedule, schedule_prepared};
pub use snapshot::*;
