//! Narrow copies of Kubernetes objects the controller keeps many of in
//! memory, deserialized straight from the API server's JSON with only the
//! fields its decisions read.

pub mod pod;
pub mod shared;

pub use pod::{Pod, PodSpec};
