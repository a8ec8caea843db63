//! Resource names.

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The NodePool limit on the number of nodes.
pub const NODES: &str = "nodes";
