//! The karpenter controller: the imperative shell around the pure `engine`.
//! It watches Kubernetes, runs provider plugins in wasmtime, and carries out
//! the engine's plans.

pub mod bench;
pub mod cli;
pub mod conformance;
pub mod controller;
pub mod crds;
pub mod records;
pub mod simulate;
pub mod slim;
pub mod snapshot;
