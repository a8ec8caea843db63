//! Well-known label and annotation keys, and the values Karpenter gives them.

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const REGISTERED: &str = "karpenter.sh/registered";

/// Labels every node gets from its instance type, offering or NodePool, so a
/// NodePool need not define them for a pod to require them.
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

/// Labels every instance type a provider serves must pin in its requirements.
pub const INSTANCE_TYPE_MUST_DEFINE: [&str; 5] = [INSTANCE_TYPE, ARCH, OS, ZONE, CAPACITY_TYPE];

pub const ON_DEMAND: &str = "on-demand";
pub const SPOT: &str = "spot";
pub const RESERVED: &str = "reserved";

/// Annotation (on a pod or a node) that blocks voluntary disruption.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Annotations on a NodeClaim: the hash of its NodePool's template, for drift.
pub const NODE_POOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODE_POOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// "true" on a NodeClaim some of whose instance types a NodeOverlay priced.
pub const PRICE_OVERLAY_APPLIED: &str = "karpenter.sh/price-overlay-applied";
/// "true" on a NodeClaim some of whose instance types a NodeOverlay gave capacity.
pub const CAPACITY_OVERLAY_APPLIED: &str = "karpenter.sh/capacity-overlay-applied";
/// Annotation on a static pod's mirror: it goes with its node.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// On a NodeClaim: when its drain must be over (RFC 3339), after which the
/// node's remaining pods are deleted rather than evicted.
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";

/// The finalizer on NodeClaims and nodes that holds them until their
/// instance is gone.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
