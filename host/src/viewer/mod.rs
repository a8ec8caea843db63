//! `karpenter viewer`: the nodes as the controller sees them, drawn from
//! the same watches and snapshots it decides on. `frame.rs` draws one
//! frame from a snapshot, `controls.rs` says what each key does; the
//! command (`cli/viewer.rs`) reads the cluster and runs the terminal.

pub mod controls;
pub mod frame;
