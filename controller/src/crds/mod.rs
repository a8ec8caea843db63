//! The karpenter.sh/v1 API: NodePool and NodeClaim, field for field
//! compatible with Karpenter's, and its well-known names; their CRDs are in
//! charts/karpenter/crds. Also the CRDs of the NodeClass kinds plugins serve.

pub mod node_class;
pub mod nodeclaim;
pub mod nodepool;

pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodepool::{NodePool, NodePoolSpec};
