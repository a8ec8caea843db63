//! The Rust SDK for karpenter provider plugins.
//!
//! A provider is a WebAssembly component implementing the
//! `provider-plugin-complete` world of `wit/v0.1.4/provider.wit`. This crate holds the generated bindings
//! plus the helpers most providers need, so a provider is mostly its own cloud
//! logic:
//!
//! ```ignore
//! use karpenter_plugin_sdk::prelude::*;
//! struct MyCloud;
//! impl Guest for MyCloud { /* metadata, get_instance_types, create, ... */ }
//! impl CompactCatalog for MyCloud {} // no tables: get_instance_types is asked
//! impl Interruption for MyCloud {} // no notice before the cloud takes an instance
//! karpenter_plugin_sdk::export!(MyCloud);
//! ```
//!
//! Build with `cargo build --target wasm32-wasip2 --profile plugin`.

pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.1.4",
        world: "provider-plugin-complete",
        generate_all,
        pub_export_macro: true,
        default_bindings_module: "karpenter_plugin_sdk::bindings",
    });
}

pub mod catalog;
pub mod catalog_table;
pub mod errors;
pub mod http;
pub mod interruption;
pub mod leftovers;
pub mod log;
pub mod node;
pub mod node_class;
pub mod requirements;
pub mod reserved;
pub mod resources;

pub use bindings::export;
pub use serde_json;
/// The words karpenter.sh objects are written in, as the host reads them.
pub use vocabulary::{duration, labels, taints};

/// Everything a provider implementation usually needs in scope.
pub mod prelude {
    pub use crate::bindings::exports::karpenter::provider::provider::Guest;
    pub use crate::bindings::karpenter::provider::types::{
        Condition, ConditionStatus, CreateError, Error, Instance, InstanceState, InstanceType,
        InsufficientCapacity, NodeClaim, NodeClass, NodeClassKind, NodeClassStatus, NodePool,
        Offering, OfferingRef, Operator, OtherError, Overhead, ProviderMetadata, RepairPolicy,
        Requirement, Taint, TaintEffect,
    };
    pub use crate::bindings::karpenter::provider::{cache, cluster, config, signing, tokens};
    pub use crate::catalog::CompactCatalog;
    pub use crate::errors::*;
    pub use crate::interruption::{Interruption, InterruptionSignal};
    pub use crate::labels;
    pub use crate::leftovers::leftover;
    pub use crate::node::{kubelet_taint, node_labels, node_taints, resolved_labels};
    pub use crate::node_class::ensure_kind;
    pub use crate::requirements::{
        cheapest_offering_of, label_allowed, listed_rank, listed_types, offering_to_launch,
    };
    pub use crate::reserved::add_reserved_offering;
    pub use crate::resources::*;
}
