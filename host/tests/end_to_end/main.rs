//! The end-to-end tests, in one binary: every case needs a cluster from
//! `tests/cluster/up NAME` (`KARPENTER_TEST_CLUSTER=NAME`) and is ignored
//! as `needs a cluster: ...`, so `cargo test -- --ignored` runs them all; CI
//! does, so a new one cannot be forgotten. Cases that need a cluster of
//! their own (they restart its API server, or measure it) live under
//! `own_cluster` and run apart.

#[path = "../common/mod.rs"]
mod common;

mod api_reads;
mod azure_cluster;
mod azure_errors;
mod azure_quota;
mod azure_reservations;
mod azure_spot_eviction;
mod capacity_buffer;
mod chart;
mod config_helm;
mod conformance_cluster;
mod controller;
mod disruption;
mod kwok_cluster;
mod nebius;
mod node_overlay;
mod own_cluster;
mod prometheus;
mod reserved_capacity;
mod simulate_cluster;
mod static_nodepool;
mod two_clouds;
mod viewer;
