//! Outbound HTTP for plugins: one pooled client shared by every plugin
//! instance (TLS, HTTP/2 by ALPN, keep-alive), behind a per-plugin allow-list.
//!
//! wasmtime-wasi-http's default sender opens a connection per request and
//! speaks only HTTP/1.1; gRPC needs HTTP/2, and a hundred concurrent VM
//! creates polling every second need pooling.

use super::allowlist::AllowList;
use super::budget::{MemoryBudget, Use};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// The clients every plugin's requests go through.
#[derive(Clone)]
pub struct OutboundHttp {
    /// HTTP/1.1 or HTTP/2 negotiated by ALPN.
    client: reqwest::Client,
    /// Cleartext HTTP/2 by prior knowledge, for h2c gRPC endpoints.
    h2c: reqwest::Client,
    /// The cluster's API endpoint (`host:port`) and a client that also
    /// trusts the cluster's CA, for it alone: a cluster CA vouches for its
    /// API server, not for any other host a plugin talks to.
    cluster: Option<(String, reqwest::Client)>,
}

impl OutboundHttp {
    /// `extra_roots`: PEM certificates trusted besides the system roots (a
    /// test CA, a private cloud's CA). `cluster`: the API endpoint's URL and
    /// the cluster's CA bundle, trusted for that endpoint only.
    pub fn new(extra_roots: &[Vec<u8>], cluster: Option<(&str, &str)>) -> anyhow::Result<Self> {
        let build = |h2c: bool, cluster_ca: Option<&str>| -> anyhow::Result<reqwest::Client> {
            let mut b = reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(90))
                .connect_timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("karpenter-wasm/", env!("CARGO_PKG_VERSION")));
            let cluster_ca = cluster_ca.map(str::as_bytes);
            for pem in extra_roots.iter().map(Vec::as_slice).chain(cluster_ca) {
                for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                    b = b.add_root_certificate(cert);
                }
            }
            if h2c {
                b = b.http2_prior_knowledge();
            }
            Ok(b.build()?)
        };
        let cluster = match cluster {
            Some((endpoint, ca)) if !ca.trim().is_empty() => {
                let uri: http::Uri = endpoint
                    .parse()
                    .map_err(|e| anyhow::anyhow!("cluster endpoint {endpoint:?}: {e}"))?;
                let authority = authority_of(&uri).unwrap_or_default();
                match build(false, Some(ca)) {
                    Ok(client) => Some((authority, client)),
                    Err(e) => {
                        tracing::warn!(
                            error = format!("{e:#}"),
                            "the cluster CA bundle is not usable: plugins' requests to the API server trust the system roots only"
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        Ok(OutboundHttp {
            client: build(false, None)?,
            h2c: build(true, None)?,
            cluster,
        })
    }

    /// The pooled TLS client, trusting the same roots as plugins' requests.
    pub fn client(&self) -> reqwest::Client {
        self.client.clone()
    }
}

/// The wasi:http hooks of one plugin instance.
pub struct PluginHttp {
    pub plugin: Arc<str>,
    /// Request bodies are buffered whole, within the plugin's memory budget.
    pub budget: Arc<MemoryBudget>,
    pub allow: Arc<AllowList>,
    pub h2c_hosts: Arc<BTreeSet<String>>,
    pub clients: OutboundHttp,
}

type SendResult = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
>;

impl WasiHttpHooks for PluginHttp {
    // reqwest writes Host (HTTP/1.1) or :authority (HTTP/2) itself.
    fn set_host_header(&mut self) -> bool {
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let uri = request.uri().clone();
        let scheme = uri.scheme_str().unwrap_or("https").to_string();
        let host = uri.host().unwrap_or_default().to_string();
        let port = uri.port_u16();
        if !self.allow.allows(&scheme, &host, port) {
            tracing::warn!(plugin = %self.plugin, url = %uri, "outbound HTTP request denied: host not in the plugin's allowedHosts");
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let to_cluster_api =
            |api: &String| scheme == "https" && authority_of(&uri).as_ref() == Some(api);
        let client = if scheme == "http" && self.h2c_hosts.contains(&authority) {
            self.clients.h2c.clone()
        } else if let Some((api, client)) = &self.clients.cluster
            && to_cluster_api(api)
        {
            client.clone()
        } else {
            self.clients.client.clone()
        };
        let plugin = self.plugin.clone();
        let budget = self.budget.clone();
        Box::new(async move {
            let (parts, body) = request.into_parts();
            let (body, _reserved) = buffer(body, &budget).await?;
            let mut builder = client
                .request(parts.method, uri.to_string())
                .headers(parts.headers)
                .body(body);
            if let Some(t) = options.as_ref().and_then(|o| o.first_byte_timeout) {
                builder = builder.timeout(t);
            }
            let response = builder.send().await.map_err(|e| {
                tracing::debug!(plugin = %plugin, url = %uri, error = %e, "outbound HTTP request failed");
                classify(&e)
            })?;
            let response: http::Response<reqwest::Body> = response.into();
            let response = response.map(|b| b.map_err(|e| classify(&e)).boxed_unsync());
            let io: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async { Ok(()) });
            Ok((response, io))
        })
    }
}

/// `host:port` of an HTTPS URL, the port defaulted.
fn authority_of(uri: &http::Uri) -> Option<String> {
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(443);
    Some(format!("{host}:{port}"))
}

/// Bytes reserved in a plugin's budget until dropped.
struct Reserved<'a> {
    budget: &'a MemoryBudget,
    bytes: usize,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.budget.release(Use::RequestBody, self.bytes);
    }
}

/// Reads a request body whole, each frame reserved in the plugin's budget
/// before it is kept; the reservation lasts until the request is sent.
async fn buffer(mut body: WasiBody, budget: &MemoryBudget) -> Result<(Bytes, Reserved<'_>), Error> {
    let mut reserved = Reserved { budget, bytes: 0 };
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if let Err(e) = budget.try_reserve(Use::RequestBody, data.len()) {
            let size = (reserved.bytes + data.len()) as u64;
            tracing::warn!(plugin = %budget.plugin(), size, error = %e, "request body refused");
            return Err(Error::HttpRequestBodySize(Some(size)));
        }
        reserved.bytes += data.len();
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), reserved))
}

fn classify(e: &reqwest::Error) -> Error {
    if e.is_timeout() {
        Error::ConnectionTimeout
    } else if e.is_connect() {
        Error::ConnectionRefused
    } else {
        Error::InternalError(Some(format!("{e:#}")))
    }
}
