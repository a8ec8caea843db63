//! The karpenter.sh API: NodePool and NodeClaim (v1) and NodeOverlay
//! (v1alpha1), field for field compatible with Karpenter's, and its
//! well-known names; their CRDs are in charts/karpenter/crds. Also the CRDs
//! of the NodeClass kinds plugins serve, and autoscaling.x-k8s.io's
//! CapacityBuffer (v1beta1), which Karpenter shares with Cluster Autoscaler.

pub mod capacity_buffer;
pub mod node_class;
pub mod node_overlay;
pub mod nodeclaim;
pub mod nodepool;

pub use capacity_buffer::CapacityBuffer;
pub use node_overlay::NodeOverlay;
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodepool::{NodePool, NodePoolSpec};
