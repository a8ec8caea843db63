//! Access tokens from Microsoft Entra ID by workload identity: the pod's
//! projected service-account token (the federated token file) is exchanged
//! for an access token, a client-credentials grant with the file's content
//! as client assertion. `azure_identity` does the exchange, re-reads the file
//! every ten minutes (kubelet rotates it), and caches each set of scopes'
//! token until five minutes before it expires.

use super::transport::ReqwestTransport;
use super::{TokenFuture, TokenSource};
use crate::bindings::v0_1_4::karpenter::provider::tokens::AccessToken;
use anyhow::Context;
use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::TokenCredential;
use azure_core::http::{ClientOptions, Transport};
use azure_identity::{
    ClientAssertionCredentialOptions, WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use std::path::PathBuf;
use std::sync::Arc;

/// Entra ID's authority in Azure's public cloud.
pub const PUBLIC_AUTHORITY: &str = "https://login.microsoftonline.com";

/// Who to authenticate as, where, and with which federated token: what the
/// Azure workload identity webhook injects into the pod's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadIdentityOptions {
    /// AZURE_TENANT_ID
    pub tenant_id: String,
    /// AZURE_CLIENT_ID: the managed identity or app registration.
    pub client_id: String,
    /// AZURE_FEDERATED_TOKEN_FILE
    pub token_file: PathBuf,
    /// AZURE_AUTHORITY_HOST, an https URL (the webhook sets the cloud's).
    pub authority_host: String,
}

impl WorkloadIdentityOptions {
    /// The options from environment variables looked up by `var`; `None`
    /// unless both AZURE_FEDERATED_TOKEN_FILE and AZURE_CLIENT_ID are set.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Self>> {
        let var = |name: &str| var(name).filter(|v| !v.is_empty());
        let (Some(token_file), Some(client_id)) =
            (var("AZURE_FEDERATED_TOKEN_FILE"), var("AZURE_CLIENT_ID"))
        else {
            return Ok(None);
        };
        let tenant_id = var("AZURE_TENANT_ID").context(
            "AZURE_FEDERATED_TOKEN_FILE and AZURE_CLIENT_ID are set but AZURE_TENANT_ID is not",
        )?;
        Ok(Some(WorkloadIdentityOptions {
            tenant_id,
            client_id,
            token_file: token_file.into(),
            authority_host: var("AZURE_AUTHORITY_HOST")
                .unwrap_or_else(|| PUBLIC_AUTHORITY.to_string()),
        }))
    }
}

/// A token source backed by Azure workload identity.
pub struct AzureWorkloadIdentity {
    credential: Arc<WorkloadIdentityCredential>,
    options: WorkloadIdentityOptions,
}

impl AzureWorkloadIdentity {
    /// Reads the federated token file once to check it is there; requests go
    /// through `transport`.
    pub fn new(
        options: WorkloadIdentityOptions,
        transport: ReqwestTransport,
    ) -> anyhow::Result<Self> {
        let mut cloud = CustomConfiguration::default();
        cloud.authority_host = options.authority_host.clone();
        let client_options = ClientOptions {
            transport: Some(Transport::new(Arc::new(transport))),
            cloud: Some(Arc::new(CloudConfiguration::from(cloud))),
            ..ClientOptions::default()
        };
        // Every field is explicit, so the credential reads no environment.
        let credential = WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
            credential_options: ClientAssertionCredentialOptions { client_options },
            client_id: Some(options.client_id.clone()),
            tenant_id: Some(options.tenant_id.clone()),
            token_file_path: Some(options.token_file.clone()),
        }))
        .with_context(|| {
            format!(
                "azure workload identity for client {} in tenant {} with token file {}",
                options.client_id,
                options.tenant_id,
                options.token_file.display()
            )
        })?;
        Ok(AzureWorkloadIdentity {
            credential,
            options,
        })
    }

    pub fn options(&self) -> &WorkloadIdentityOptions {
        &self.options
    }
}

impl TokenSource for AzureWorkloadIdentity {
    fn token<'a>(&'a self, scopes: &'a [String]) -> TokenFuture<'a> {
        Box::pin(async move {
            let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            match self.credential.get_token(&scope_refs, None).await {
                Ok(token) => Ok(AccessToken {
                    token: token.token.secret().to_string(),
                    expires_at: u64::try_from(token.expires_on.unix_timestamp()).unwrap_or(0),
                }),
                Err(e) => {
                    let o = &self.options;
                    tracing::warn!(
                        client_id = %o.client_id,
                        tenant_id = %o.tenant_id,
                        authority = %o.authority_host,
                        ?scopes,
                        error = %e,
                        "azure workload identity: no token"
                    );
                    Err(format!(
                        "azure workload identity (client {}, tenant {}, authority {}): no token for {scopes:?}: {e}",
                        o.client_id, o.tenant_id, o.authority_host
                    ))
                }
            }
        })
    }

    fn describe(&self) -> String {
        format!(
            "azure workload identity (client {}, tenant {}, authority {})",
            self.options.client_id, self.options.tenant_id, self.options.authority_host
        )
    }
}
