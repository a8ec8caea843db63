//! The karpenter.sh API: NodePool and NodeClaim (v1) and NodeOverlay
//! (v1alpha1), field for field compatible with Karpenter's, and its
//! well-known names; their CRDs are in charts/karpenter/crds. Also the CRDs
//! of the NodeClass kinds plugins serve.

pub mod node_class;
pub mod node_overlay;
pub mod nodeclaim;
pub mod nodepool;

pub use node_overlay::NodeOverlay;
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodepool::{NodePool, NodePoolSpec};
