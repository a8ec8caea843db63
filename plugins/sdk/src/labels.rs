//! Well-known label keys every instance type must define, and common values.

pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
pub const HOSTNAME: &str = "kubernetes.io/hostname";

pub const ON_DEMAND: &str = "on-demand";
pub const SPOT: &str = "spot";
pub const RESERVED: &str = "reserved";

/// The taint every new node carries until the controller registers it.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";

/// Every label an instance type's requirements must define.
pub const WELL_KNOWN: [&str; 5] = [INSTANCE_TYPE, ARCH, OS, ZONE, CAPACITY_TYPE];
