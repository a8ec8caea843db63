//! The host's tests that need no cluster, in one binary: each module is one
//! of the host's concerns. Tests that measure the whole process (peak RSS,
//! allocations) keep binaries of their own (`sandbox.rs`, `store_memory.rs`).

#[path = "../common/mod.rs"]
mod common;

mod azure_workload_identity;
mod catalog_table;
mod child_compiler;
mod conformance;
mod outbound_http;
mod plugin_oci;
mod plugin_sources;
mod registry;
mod registry_tokens;
mod simulate;
