//! The `karpenter` command: the controller (`karpenter_controller`) and the
//! tools around it that share its plugins and engine: `simulate`, `explain`,
//! `bench`, `plugin test` and the conformance suite.

pub mod bench;
pub mod cli;
pub mod conformance;
pub mod simulate;
pub mod viewer;
