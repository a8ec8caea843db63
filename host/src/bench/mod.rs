//! Benchmarks behind `karpenter bench`: the figures the project promises,
//! measured the same way every time.

pub mod disruption;
pub mod plugins;
pub mod scheduling;
pub mod slow_server;
