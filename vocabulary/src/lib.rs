//! The words karpenter.sh objects are written in. The engine, the controller
//! and the plugin SDK all read and write them through this crate, so a label
//! key, an operator or a duration means the same thing on each side of the
//! plugin boundary. No dependencies (serde behind a feature): plugins link it.

pub mod duration;
pub mod labels;
pub mod operator;
pub mod resources;
pub mod taints;

pub use duration::InvalidDuration;
pub use operator::Operator;
