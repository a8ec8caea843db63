//! Taint keys Karpenter sets and reads.

/// On every new node until the controller registers it; never blocks
/// scheduling in a simulation.
pub const UNREGISTERED: &str = "karpenter.sh/unregistered";
/// On a node chosen for disruption, so nothing new lands on it.
pub const DISRUPTED: &str = "karpenter.sh/disrupted";
/// Known ephemeral taints: a node carries them while it starts, so they do
/// not keep pods away from a managed node that is not initialized yet.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const CLOUD_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// A family of ephemeral taints: the Node Readiness Controller's, one key
/// per readiness rule under this prefix.
pub const READINESS_PREFIX: &str = "readiness.k8s.io/";
