//! The host's reqwest client as an `azure_core` HTTP client, so the Azure SDK
//! sends its requests through the same HTTP and TLS stack as everything else
//! in the host (azure_core's own client is reqwest 0.13 with a second TLS
//! stack).

use azure_core::error::{Error, ErrorKind};
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Method, Request};
use futures::TryStreamExt;
use std::collections::HashMap;
use std::time::Duration;

/// A reqwest 0.12 client that `azure_core` pipelines can send through.
#[derive(Clone, Debug)]
pub struct ReqwestTransport(pub reqwest::Client);

impl ReqwestTransport {
    /// A client for Entra ID: no redirects, bounded waits. `extra_roots`: PEM
    /// bundles trusted besides the built-in roots (a private cloud's CA).
    pub fn new(extra_roots: &[Vec<u8>]) -> anyhow::Result<Self> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("karpenter-wasm/", env!("CARGO_PKG_VERSION")));
        for pem in extra_roots {
            for cert in reqwest::Certificate::from_pem_bundle(pem)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(ReqwestTransport(builder.build()?))
    }
}

#[async_trait::async_trait]
impl HttpClient for ReqwestTransport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let mut req = self
            .0
            .request(method(request.method())?, request.url().clone());
        for (name, value) in request.headers().iter() {
            req = req.header(name.as_str(), value.as_str());
        }
        req = match request.body().clone() {
            Body::Bytes(bytes) => req.body(bytes),
            Body::SeekableStream(stream) => req.body(reqwest::Body::wrap_stream(stream)),
        };
        let response = req.send().await.map_err(|e| {
            // The retry policy retries Io and Connection errors.
            let kind = if e.is_connect() {
                ErrorKind::Connection
            } else {
                ErrorKind::Io
            };
            Error::with_error(kind, e, "sending the request")
        })?;
        let status = response.status().as_u16().into();
        let headers: HashMap<HeaderName, HeaderValue> = response
            .headers()
            .iter()
            .filter_map(|(k, v)| {
                let v = v.to_str().ok()?;
                Some((k.as_str().to_owned().into(), v.to_owned().into()))
            })
            .collect();
        let body = response
            .bytes_stream()
            .map_err(|e| Error::with_error(ErrorKind::Io, e, "reading the response body"));
        Ok(AsyncRawResponse::new(
            status,
            Headers::from(headers),
            Box::pin(body),
        ))
    }
}

fn method(m: Method) -> azure_core::Result<reqwest::Method> {
    reqwest::Method::from_bytes(m.as_str().as_bytes())
        .map_err(|e| Error::with_error(ErrorKind::Other, e, "the request method"))
}
