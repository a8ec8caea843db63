//! Well-known label keys and resource names.

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const NODE_POOL: &str = "karpenter.sh/nodepool";

/// Labels every node gets from its instance type or offering, so a NodePool need
/// not define them for a pod to require them.
pub const WELL_KNOWN: &[&str] = &[
    HOSTNAME,
    ZONE,
    REGION,
    CAPACITY_TYPE,
    INSTANCE_TYPE,
    ARCH,
    OS,
    NODE_POOL,
];

/// Taint Karpenter puts on a node until it registers; never blocks scheduling.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// The NodePool limit on the number of nodes.
pub const NODES: &str = "nodes";
