//! The karpenter.sh/v1 API: NodePool and NodeClaim, field for field
//! compatible with Karpenter's, and its well-known names.

pub mod labels;
pub mod nodeclaim;
pub mod nodepool;

pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodepool::{NodePool, NodePoolSpec};
