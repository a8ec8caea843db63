//! `karpenter:provider/tokens`: access tokens obtained by the host, so a
//! plugin never holds a long-lived credential.

use crate::plugins::bindings::v0_1_0::karpenter::provider::tokens::{AccessToken, Host};
use crate::plugins::state::State;
use std::future::Future;
use std::pin::Pin;

pub type TokenFuture<'a> = Pin<Box<dyn Future<Output = Result<AccessToken, String>> + Send + 'a>>;

/// Where tokens come from (Azure workload identity in production).
pub trait TokenSource: Send + Sync {
    fn token<'a>(&'a self, scopes: &'a [String]) -> TokenFuture<'a>;
}

/// The host has no token source configured.
pub struct NoTokenSource;

impl TokenSource for NoTokenSource {
    fn token<'a>(&'a self, _scopes: &'a [String]) -> TokenFuture<'a> {
        Box::pin(async { Err("the host has no token source configured".to_string()) })
    }
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
