//! Host bindings of every contract version this host loads. A released
//! version's WIT is frozen under `wit/v<version>/`. Versions that differ in
//! their patch only add imports (`@since`), so one module generated from the
//! newest patch serves them all: wasmtime links a plugin's `@0.1.0` imports
//! and finds its `@0.1.0` export through the `@0.1.2` names by semver. The
//! `catalog` (0.1.2), `interruption` (0.1.3) and `catalog-table` (0.1.4)
//! exports are optional: their bindings are generated apart and looked up
//! per component.

/// The names of the contract versions this host supports, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.1.4", "0.1.3", "0.1.2", "0.1.1", "0.1.0"];

/// The interface a provider exports, without version: `<this>@<version>`.
pub const PROVIDER_EXPORT: &str = "karpenter:provider/provider";

pub mod v0_1_4 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.4",
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

/// The bindings of a world that adds an optional export to
/// `provider-plugin`, on the same types as the main bindings.
macro_rules! optional_export {
    ($world:literal) => {
        wasmtime::component::bindgen!({
            path: "../wit/v0.1.4",
            world: $world,
            imports: { default: async },
            exports: { default: async },
            with: {
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                "karpenter:provider/types": super::v0_1_4::karpenter::provider::types,
                "karpenter:provider/log": super::v0_1_4::karpenter::provider::log,
                "karpenter:provider/config": super::v0_1_4::karpenter::provider::config,
                "karpenter:provider/tokens": super::v0_1_4::karpenter::provider::tokens,
                "karpenter:provider/cache": super::v0_1_4::karpenter::provider::cache,
                "karpenter:provider/cluster": super::v0_1_4::karpenter::provider::cluster,
                "karpenter:provider/signing": super::v0_1_4::karpenter::provider::signing,
            },
            additional_derives: [serde::Serialize],
        });
    };
}

/// The optional `catalog` export (0.1.2).
pub mod catalog {
    optional_export!("provider-plugin-with-catalog");
    pub use exports::karpenter::provider::catalog::*;
}

/// The optional `catalog-table` export (0.1.4).
pub mod catalog_table {
    optional_export!("provider-plugin-with-catalog-table");
    pub use exports::karpenter::provider::catalog_table::*;
}

/// The optional `interruption` export (0.1.3).
pub mod interruption {
    optional_export!("provider-plugin-with-interruption");
    pub use exports::karpenter::provider::interruption::*;
}

pub use v0_1_4::karpenter::provider::types as wit;

/// As the contract names it, for messages (`Debug` would say
/// `InstanceState::Running`).
impl std::fmt::Display for wit::InstanceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            wit::InstanceState::Pending => "pending",
            wit::InstanceState::Running => "running",
            wit::InstanceState::Stopping => "stopping",
            wit::InstanceState::Terminated => "terminated",
        })
    }
}

/// As a Kubernetes condition says it.
impl std::fmt::Display for wit::ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            wit::ConditionStatus::True => "True",
            wit::ConditionStatus::False => "False",
            wit::ConditionStatus::Unknown => "Unknown",
        })
    }
}

/// The contract's operators are the vocabulary's, case for case.
impl From<wit::Operator> for vocabulary::Operator {
    fn from(op: wit::Operator) -> Self {
        use vocabulary::Operator as V;
        match op {
            wit::Operator::In => V::In,
            wit::Operator::NotIn => V::NotIn,
            wit::Operator::Exists => V::Exists,
            wit::Operator::DoesNotExist => V::DoesNotExist,
            wit::Operator::Gt => V::Gt,
            wit::Operator::Lt => V::Lt,
            wit::Operator::Gte => V::Gte,
            wit::Operator::Lte => V::Lte,
        }
    }
}

impl From<vocabulary::Operator> for wit::Operator {
    fn from(op: vocabulary::Operator) -> Self {
        use vocabulary::Operator as V;
        match op {
            V::In => wit::Operator::In,
            V::NotIn => wit::Operator::NotIn,
            V::Exists => wit::Operator::Exists,
            V::DoesNotExist => wit::Operator::DoesNotExist,
            V::Gt => wit::Operator::Gt,
            V::Lt => wit::Operator::Lt,
            V::Gte => wit::Operator::Gte,
            V::Lte => wit::Operator::Lte,
        }
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// Released contracts are frozen: a change here breaks plugins already built.
    #[test]
    fn released_contracts_do_not_change() {
        let released = [
            (
                "0.1.0",
                include_str!("../../wit/v0.1.0/provider.wit"),
                "8c03c19f4958edfca801d3814b8134b08bc70afbe002261f1f2ea12a4a53d0c6",
            ),
            (
                "0.1.1",
                include_str!("../../wit/v0.1.1/provider.wit"),
                "e8cd6357509cd72e63142459350488effa596a2763db56469ce34063ea461ef8",
            ),
            (
                "0.1.2",
                include_str!("../../wit/v0.1.2/provider.wit"),
                "51bb83096c5852c29a38bb83da0cc159c3023cb3883096a399ae5221c2a67089",
            ),
            (
                "0.1.3",
                include_str!("../../wit/v0.1.3/provider.wit"),
                "c37ba9110043d6c0d842b8454870addc02f8fc0e95a61b0d51cf0037229d0b6f",
            ),
            (
                "0.1.4",
                include_str!("../../wit/v0.1.4/provider.wit"),
                "0f52f1d75e5709bda0388565cdcd52a6fcbe4edee5f30639b0d136544effb407",
            ),
        ];
        for (version, wit, sha256) in released {
            assert!(super::SUPPORTED_VERSIONS.contains(&version));
            assert!(wit.contains(&format!("package karpenter:provider@{version};")));
            assert_eq!(
                hex::encode(Sha256::digest(wit)),
                sha256,
                "wit/v{version}/provider.wit changed after its release; add a new version instead"
            );
        }
    }
}
