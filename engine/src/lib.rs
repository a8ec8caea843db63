//! The pure provisioning and disruption engine: given a [`Snapshot`] of the
//! cluster (NodePools with their instance types, existing nodes, daemonsets,
//! pending pods), return a [`Plan`]: which pods go on which existing node,
//! which new NodeClaims to create, and why the rest cannot be scheduled. Given
//! a [`disruption::DisruptionSnapshot`], [`disrupt`] returns a
//! [`disruption::DisruptionPlan`]: which nodes to remove or replace now, and
//! why every other node stays.
//!
//! # Using it
//! - Build a [`Snapshot`]: plain serde data. Resource amounts are integers in
//!   canonical units (`cpu` in millis, bytes, counts); [`parse_resource`] turns
//!   Kubernetes quantity strings into them. Labels and resource lists are
//!   [`StringMap`]s (collect them from any iterator of pairs).
//! - Call [`schedule`], or [`Prepared::new`] once and [`schedule_prepared`]
//!   many times. A disruption simulation ("these nodes removed") is a snapshot
//!   without those nodes and with their pods pending.
//! - Read the [`Plan`]. A [`NewNodeClaim`] lists its instance types as indexes
//!   into [`Plan::instance_types`]; [`Plan::node_claim_requirements`] gives the
//!   full requirement list (with `node.kubernetes.io/instance-type In [...]`,
//!   cheapest first) to create it with, [`Plan::pods_of`] its pods and
//!   [`Plan::total_price_per_hour`] the cost of the cheapest offerings.
//! - For disruption, build a [`disruption::DisruptionSnapshot`] (the same
//!   NodePools with their disruption settings, nodes with their bound pods'
//!   full specs, PDBs, `now` in Unix seconds) and call [`disrupt`] every pass.
//!   Its command's replacements are a [`Plan`], created like provisioning's.
//! - [`bench::scheduling_snapshot`] reproduces Karpenter's scheduling benchmark.
//!
//! # Where to start reading
//! `snapshot` and `plan` (the API), then `scheduler` (its module doc lists the
//! order), then `disruption` (which runs the scheduler to simulate). The label algebra is `requirements`; `selector`, `taints`,
//! `resources`, `bitset`, `intern` and `map` are small helpers.
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
//! CPU, memory, creation, uid order; existing nodes (initialized first, then by
//! name) before NodeClaims made in this run (fewest pods first) before a new
//! NodeClaim per NodePool (weight, then name); preferences relaxed one at a
//! time in Karpenter's order; limits subtracted pessimistically (the largest
//! remaining instance type of each new NodeClaim).
//!
//! Architecture Invariant: checks that only get stricter as a NodeClaim fills
//! (resources, requirements, ports, hostname topology) may be remembered as
//! permanent failures per pod class; zone-like topology may not, because other
//! domains' counts move.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod bench;
pub mod buffer;
pub mod disruption;
mod map;
pub mod overlay;
pub mod plan;
pub mod quantity;
pub mod snapshot;
pub mod static_pool;
pub mod whatif;

mod bitset;
mod intern;
mod requirements;
mod resources;
mod scheduler;
mod selector;
mod taints;

pub use disruption::disrupt;
pub use plan::{NewNodeClaim, OfferingChoice, Placement, Plan, PodRef, Target, Unschedulable};
pub use quantity::{Quantity, QuantityError, parse_resource};
pub use resources::format_amount as format_resource;
pub use scheduler::{Prepared, schedule, schedule_prepared};
pub use snapshot::*;
