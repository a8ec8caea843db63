//! The plugin runtime: provider plugins are WebAssembly components loaded
//! into wasmtime, each sandboxed (no files, no environment, no sockets, HTTP
//! only to allowed hosts, capped memory, CPU budget) and granted only the
//! capabilities its configuration names.
//!
//! Architecture Invariant: nothing here knows any cloud. Cloud specifics live
//! in the plugins; this module moves bytes and enforces limits.

pub mod allowlist;
pub mod bindings;
pub mod budget;
pub mod capabilities;
pub mod compile;
pub mod config;
pub mod http;
pub mod inspect;
pub mod metrics;
pub mod objects;
pub mod plugin;
pub mod precompiled;
pub mod registry;
pub mod runtime;
pub mod source;
pub mod state;
pub mod validate;

pub use bindings::wit;
pub use compile::Compiler;
pub use config::PluginConfig;
pub use plugin::{CallError, Plugin};
pub use registry::Registry;
pub use runtime::{Runtime, RuntimeOptions};
