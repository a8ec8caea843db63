//! The Azure workload identity token source against an Entra ID emulator:
//! a real HTTPS token endpoint on 127.0.0.1 with a CA made here, driven by
//! the real `azure_identity` credential through the host's transport.

use crate::common;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use karpenter_controller::records;
use karpenter_runtime::capabilities::tokens::azure::{
    AzureWorkloadIdentity, WorkloadIdentityOptions,
};
use karpenter_runtime::capabilities::tokens::transport::ReqwestTransport;
use karpenter_runtime::capabilities::tokens::{self, TokenSource};
use karpenter_runtime::{PluginConfig, RuntimeOptions, wit};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "0d0b4a36-4fb5-4a2a-9ea5-5c1a8b2e6a11";
/// What kubelet projects into the pod: a service-account token whose audience
/// is api://AzureADTokenExchange.
const FEDERATED: &str =
    "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsiYXBpOi8vQXp1cmVBRFRva2VuRXhjaGFuZ2UiXX0.c2ln";
const ARM: &str = "https://management.azure.com/.default";
const LIFETIME: u64 = 3599;

/// One request the emulator answered: its path and form fields.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    form: BTreeMap<String, String>,
}

/// Entra ID's token endpoint for a tenant whose app `CLIENT` trusts the
/// federated token `FEDERATED`.
struct Entra {
    authority: String,
    ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Entra {
    async fn start() -> Entra {
        let cert = crate::common::https::LocalCert::new();
        let tls = cert.server_config();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, state) = (acceptor.clone(), state.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, hyper::Error>(answer(req, &state).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Entra {
            authority: format!("https://127.0.0.1:{port}"),
            ca_pem: cert.ca_pem.clone(),
            seen,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn transport(&self) -> ReqwestTransport {
        ReqwestTransport::new(&[self.ca_pem.clone().into_bytes()]).expect("transport")
    }

    fn options(&self, token_file: PathBuf) -> WorkloadIdentityOptions {
        WorkloadIdentityOptions {
            tenant_id: TENANT.into(),
            client_id: CLIENT.into(),
            token_file,
            authority_host: self.authority.clone(),
        }
    }

    fn source(&self, token_file: PathBuf) -> AzureWorkloadIdentity {
        AzureWorkloadIdentity::new(self.options(token_file), self.transport()).expect("credential")
    }
}

fn entra_error(
    status: StatusCode,
    error: &str,
    code: u32,
    description: &str,
) -> Response<Full<Bytes>> {
    json(
        status,
        serde_json::json!({
            "error": error,
            "error_description": format!("AADSTS{code}: {description}"),
            "error_codes": [code],
            "timestamp": "2026-11-01 12:00:00Z",
            "trace_id": "00000000-0000-0000-0000-000000000000",
            "correlation_id": "00000000-0000-0000-0000-000000000000",
        }),
    )
}

fn json(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<Seen>>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    let form: BTreeMap<String, String> = form_urlencoded::parse(&body).into_owned().collect();
    let field = |k: &str| form.get(k).map(String::as_str).unwrap_or_default();
    let issued = {
        let mut seen = seen.lock().expect("lock");
        seen.push(Seen {
            path: path.clone(),
            form: form.clone(),
        });
        seen.len()
    };
    if parts.method != hyper::Method::POST || path != format!("/{TENANT}/oauth2/v2.0/token") {
        return entra_error(
            StatusCode::NOT_FOUND,
            "invalid_request",
            90002,
            "Tenant not found.",
        );
    }
    if field("grant_type") != "client_credentials"
        || field("client_assertion_type")
            != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    {
        return entra_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            900144,
            "The request body must contain a client_credentials grant with a jwt-bearer assertion.",
        );
    }
    if field("client_id") != CLIENT {
        return entra_error(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            700016,
            "Application not found in the directory.",
        );
    }
    if field("client_assertion") != FEDERATED {
        return entra_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            700213,
            "No matching federated identity record found for presented assertion subject.",
        );
    }
    json(
        StatusCode::OK,
        serde_json::json!({
            "token_type": "Bearer",
            "expires_in": LIFETIME,
            "ext_expires_in": LIFETIME,
            "access_token": format!("entra-token-{issued}"),
        }),
    )
}

fn token_file(content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("azure-identity-token");
    std::fs::write(&path, content).expect("write token file");
    (dir, path)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[tokio::test]
async fn the_federated_token_is_exchanged_once_per_lifetime() {
    let entra = Entra::start().await;
    let (_dir, path) = token_file(FEDERATED);
    let source = entra.source(path);
    let arm = vec![ARM.to_string()];

    let first = source.token(&arm).await.expect("token");
    assert_eq!(first.token, "entra-token-1");
    let expected = now() + LIFETIME;
    assert!(
        first.expires_at + 5 >= expected && first.expires_at <= expected,
        "expires at {}, expected about {expected}",
        first.expires_at
    );
    let seen = entra.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, format!("/{TENANT}/oauth2/v2.0/token"));
    let form = &seen[0].form;
    assert_eq!(form["client_assertion"], FEDERATED);
    assert_eq!(form["client_id"], CLIENT);
    assert_eq!(form["scope"], ARM);
    assert_eq!(form["grant_type"], "client_credentials");

    // Within its lifetime the token comes from the cache.
    let second = source.token(&arm).await.expect("cached token");
    assert_eq!(second.token, first.token);
    assert_eq!(second.expires_at, first.expires_at);
    assert_eq!(entra.seen().len(), 1);

    // Other scopes are another token.
    let graph = vec!["https://graph.microsoft.com/.default".to_string()];
    assert_eq!(
        source.token(&graph).await.expect("graph").token,
        "entra-token-2"
    );
    assert_eq!(entra.seen()[1].form["scope"], graph[0]);
    assert_eq!(
        source.token(&arm).await.expect("arm").token,
        "entra-token-1"
    );
    assert_eq!(entra.seen().len(), 2);
}

#[tokio::test]
async fn a_refused_assertion_is_a_clear_error() {
    let entra = Entra::start().await;
    let (_dir, path) = token_file("a service-account token Entra ID does not trust");
    let source = entra.source(path);
    let err = source
        .token(&[ARM.to_string()])
        .await
        .expect_err("Entra ID refuses the assertion");
    for part in [
        "azure workload identity",
        CLIENT,
        TENANT,
        entra.authority.as_str(),
        ARM,
        "AADSTS700213: No matching federated identity record found",
    ] {
        assert!(err.contains(part), "{part:?} not in {err}");
    }
    // Errors are not cached: the next call asks again.
    source.token(&[ARM.to_string()]).await.expect_err("again");
    assert_eq!(entra.seen().len(), 2);
}

#[tokio::test]
async fn a_missing_token_file_fails_at_construction() {
    let entra = Entra::start().await;
    let path = PathBuf::from("/nonexistent/azure-identity-token");
    let err = AzureWorkloadIdentity::new(entra.options(path), entra.transport())
        .err()
        .expect("no token file");
    let text = format!("{err:#}");
    assert!(text.contains("/nonexistent/azure-identity-token"), "{text}");
    assert!(text.contains(CLIENT), "{text}");
}

#[tokio::test]
async fn the_environment_picks_the_token_source() {
    let entra = Entra::start().await;
    let (_dir, path) = token_file(FEDERATED);
    let vars = |pairs: &[(&str, &str)]| {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    };
    let file = path.to_str().expect("utf-8 path");

    // Nothing injected: no token source.
    let none = tokens::from_vars(vars(&[("AZURE_TENANT_ID", TENANT)]), entra.transport())
        .expect("no source");
    assert_eq!(none.describe(), "no token source");
    let err = none.token(&[ARM.to_string()]).await.expect_err("none");
    assert!(err.contains("no token source configured"), "{err}");

    // Half configured is an error, not a silent fallback.
    let err = tokens::from_vars(
        vars(&[
            ("AZURE_FEDERATED_TOKEN_FILE", file),
            ("AZURE_CLIENT_ID", CLIENT),
        ]),
        entra.transport(),
    )
    .err()
    .expect("no tenant");
    assert!(err.to_string().contains("AZURE_TENANT_ID"), "{err}");

    // The authority must be https.
    let err = tokens::from_vars(
        vars(&[
            ("AZURE_FEDERATED_TOKEN_FILE", file),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_AUTHORITY_HOST", "http://127.0.0.1:1"),
        ]),
        entra.transport(),
    )
    .err()
    .expect("plain http authority");
    assert!(format!("{err:#}").contains("HTTPS"), "{err:#}");

    // What the webhook injects: workload identity against that authority.
    let source = tokens::from_vars(
        vars(&[
            ("AZURE_FEDERATED_TOKEN_FILE", file),
            ("AZURE_CLIENT_ID", CLIENT),
            ("AZURE_TENANT_ID", TENANT),
            ("AZURE_AUTHORITY_HOST", &entra.authority),
        ]),
        entra.transport(),
    )
    .expect("workload identity");
    assert!(source.describe().contains(CLIENT), "{}", source.describe());
    let token = source.token(&[ARM.to_string()]).await.expect("token");
    assert_eq!(token.token, "entra-token-1");

    // Without AZURE_AUTHORITY_HOST: Azure's public cloud.
    let options = WorkloadIdentityOptions::from_vars(vars(&[
        ("AZURE_FEDERATED_TOKEN_FILE", file),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_TENANT_ID", TENANT),
    ]))
    .expect("valid")
    .expect("configured");
    assert_eq!(options.authority_host, "https://login.microsoftonline.com");
}

/// A plugin asks for a token through `karpenter:provider/tokens`; the
/// misbehave plugin's `token` mode reports what it got as its error.
async fn plugin_asks(tokens_granted: bool) -> (String, Entra) {
    let entra = Entra::start().await;
    let (_dir, path) = token_file(FEDERATED);
    let runtime = common::runtime_with(RuntimeOptions {
        tokens: Arc::new(entra.source(path)),
        ..RuntimeOptions::default()
    });
    let config = PluginConfig {
        settings: BTreeMap::from([
            ("MODE".to_string(), "token".to_string()),
            ("SCOPE".to_string(), ARM.to_string()),
        ]),
        tokens: tokens_granted,
        ..PluginConfig::default()
    };
    let plugin = runtime
        .load("misbehave-token", &common::plugin_wasm("misbehave"), config)
        .await
        .expect("loads");
    let pool = records::bare_node_pool(
        "default",
        wit::NodeClassRef {
            group: "test.karpenter.sh".into(),
            kind: "MisbehaveNodeClass".into(),
            name: "default".into(),
        },
    );
    let class = wit::NodeClass {
        name: "default".into(),
        generation: 1,
        json: "{}".into(),
    };
    let err = plugin
        .get_instance_types(&pool, &class)
        .await
        .expect_err("the token mode reports through its error");
    (err.to_string(), entra)
}

#[tokio::test]
async fn a_plugin_granted_tokens_gets_one() {
    let (text, entra) = plugin_asks(true).await;
    assert!(
        text.contains("token \"entra-token-1\" expires at "),
        "{text}"
    );
    let seen = entra.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].form["scope"], ARM);
}

#[tokio::test]
async fn a_plugin_not_granted_tokens_is_denied() {
    let (text, entra) = plugin_asks(false).await;
    assert!(
        text.contains("no token: tokens are not granted to plugin misbehave-token"),
        "{text}"
    );
    assert!(entra.seen().is_empty());
}
