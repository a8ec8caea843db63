//! Cases that need a control plane to themselves.

mod chaos;
mod controller_scale;
mod image;
