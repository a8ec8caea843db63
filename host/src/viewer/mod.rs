//! `karpenter viewer`: the nodes as the controller sees them, drawn from
//! the same watches and snapshots it decides on. `frame.rs` draws one
//! frame from a snapshot; the command (`cli/viewer.rs`) reads the cluster.

pub mod frame;
