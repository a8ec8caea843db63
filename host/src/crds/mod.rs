//! The karpenter.sh/v1 API: NodePool and NodeClaim, field for field
//! compatible with Karpenter's.

pub mod nodepool;

pub use nodepool::{NodePool, NodePoolSpec};
