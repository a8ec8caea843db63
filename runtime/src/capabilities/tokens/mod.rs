//! `karpenter:provider/tokens`: access tokens obtained by the host, so a
//! plugin never holds a long-lived credential.

#[cfg(feature = "azure-workload-identity")]
pub mod azure;
#[cfg(feature = "azure-workload-identity")]
pub mod transport;

use crate::bindings::v0_1_4::karpenter::provider::tokens::{AccessToken, Host};
use crate::state::State;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<AccessToken, String>> + Send + 'a>>;

/// Where tokens come from (Azure workload identity in production).
pub trait TokenSource: Send + Sync {
    fn token<'a>(&'a self, scopes: &'a [String]) -> TokenFuture<'a>;

    /// What this source is, for the start-up log.
    fn describe(&self) -> String {
        std::any::type_name::<Self>().to_string()
    }
}

/// The host has no token source configured.
pub struct NoTokenSource;

impl TokenSource for NoTokenSource {
    fn token<'a>(&'a self, _scopes: &'a [String]) -> TokenFuture<'a> {
        Box::pin(async { Err("the host has no token source configured".to_string()) })
    }

    fn describe(&self) -> String {
        "no token source".to_string()
    }
}

/// The host's token source from its environment: Azure workload identity
/// when AZURE_FEDERATED_TOKEN_FILE and AZURE_CLIENT_ID are set, none
/// otherwise. `extra_roots`: PEM bundles trusted besides the built-in roots.
#[cfg(feature = "azure-workload-identity")]
pub fn from_environment(extra_roots: &[Vec<u8>]) -> anyhow::Result<Arc<dyn TokenSource>> {
    from_vars(
        |name| std::env::var(name).ok(),
        transport::ReqwestTransport::new(extra_roots)?,
    )
}

/// Built without a cloud's token source: none.
#[cfg(not(feature = "azure-workload-identity"))]
pub fn from_environment(_extra_roots: &[Vec<u8>]) -> anyhow::Result<Arc<dyn TokenSource>> {
    Ok(Arc::new(NoTokenSource))
}

/// `from_environment` over variables looked up by `var`.
#[cfg(feature = "azure-workload-identity")]
pub fn from_vars(
    var: impl Fn(&str) -> Option<String>,
    transport: transport::ReqwestTransport,
) -> anyhow::Result<Arc<dyn TokenSource>> {
    let source: Arc<dyn TokenSource> = match azure::WorkloadIdentityOptions::from_vars(var)? {
        Some(options) => Arc::new(azure::AzureWorkloadIdentity::new(options, transport)?),
        None => Arc::new(NoTokenSource),
    };
    tracing::info!(source = %source.describe(), "token source");
    Ok(source)
}

impl Host for State {
    async fn get_token(&mut self, scopes: Vec<String>) -> Result<AccessToken, String> {
        if !self.caps.config.tokens {
            tracing::warn!(plugin = %self.caps.plugin, "token request denied: tokens not granted to this plugin");
            return Err(format!(
                "tokens are not granted to plugin {}",
                self.caps.plugin
            ));
        }
        let source = self.caps.tokens.clone();
        source.token(&scopes).await
    }
}
