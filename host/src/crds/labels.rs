//! Well-known labels, annotations, taints and finalizers of karpenter.sh.

pub const NODE_POOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
