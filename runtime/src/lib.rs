//! The plugin runtime: provider plugins are WebAssembly components loaded
//! into wasmtime, each sandboxed (no files, no environment, no sockets, HTTP
//! only to allowed hosts, capped memory, CPU budget) and granted only the
//! capabilities its configuration names.
//!
//! Architecture Invariant: nothing here knows any cloud. Cloud specifics live
//! in the plugins; this module moves bytes and enforces limits.

mod allowlist;
pub mod bindings;
mod budget;
pub mod capabilities;
pub mod catalog;
mod code;
mod compile;
mod config;
mod epoch;
mod http;
pub mod inspect;
mod metrics;
pub mod oci;
mod plugin;
mod precompiled;
mod registry;
mod runtime;
mod source;
mod state;
mod stderr;
pub mod validate;

pub use bindings::wit;
pub use budget::{Usage as MemoryUsage, Use as MemoryUse};
pub use catalog::InstanceTypes;
pub use compile::{Compiler, Tier, compile_stdin_to_stdout};
pub use config::PluginConfig;
pub use plugin::{CallError, InvalidMetadata, Plugin, WARM_IDLE};
pub use registry::{Registry, ReloadReport, decompress as decompress_plugin};
pub use runtime::{Runtime, RuntimeOptions, TIER_UP_CPU};
pub use source::SourceRoots;
