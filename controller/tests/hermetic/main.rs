//! The controller's tests that need no cluster, in one binary: each module is
//! one of its concerns.

mod crds;
mod snapshot;
