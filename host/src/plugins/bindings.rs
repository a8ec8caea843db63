//! Host bindings of every contract version this host loads. A released
//! version's WIT is frozen under `wit/v<version>/`; each gets a module here.

/// The names of the contract versions this host supports, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.0"];

/// The interface a provider exports, without version: `<this>@<version>`.
pub const PROVIDER_EXPORT: &str = "karpenter:provider/provider";

pub mod v0_1_0 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "provider-plugin",
        imports: { default: async },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
        additional_derives: [serde::Serialize],
    });
}

pub use v0_1_0::karpenter::provider::types as wit;
