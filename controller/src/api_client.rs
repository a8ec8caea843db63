//! The controller's Kubernetes client: kube's middleware (base URL, auth,
//! extra headers) over one multiplexed HTTP/2 connection.
//!
//! kube's own client speaks HTTP/1.1, where every request in flight holds a
//! TLS connection of its own. A burst of 1,000 launches opened hundreds of
//! them, each with its buffers (tens of megabytes in all) and a handshake
//! the API server paid for in CPU. client-go uses HTTP/2 for the same
//! reason; an API server that does not offer it still gets HTTP/1.1.

use anyhow::Context;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use std::time::Duration;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

/// How long any request may wait for the API server's response headers. A
/// watch's headers come at once (its events follow in the body), so this
/// bounds every request, and none hangs for ever on an API server that has
/// stopped answering: a hanging request in the leader's loops would
/// otherwise keep it acting past its lease.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// kube's server retry, but for evictions: their 429 is a
/// PodDisruptionBudget saying "not now" (with Retry-After 10 s), which the
/// drain asks again itself while it watches its deadline. Retried here, one
/// blocked eviction held the drain for minutes.
#[derive(Clone)]
struct Retry(RetryPolicy);

fn is_eviction<B>(req: &http::Request<B>) -> bool {
    req.uri().path().ends_with("/eviction")
}

impl<Res> tower::retry::Policy<http::Request<Body>, http::Response<Res>, tower::BoxError>
    for Retry
{
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut http::Request<Body>,
        result: &mut Result<http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        if is_eviction(req) {
            return None;
        }
        self.0.retry(req, result)
    }

    fn clone_request(&mut self, req: &http::Request<Body>) -> Option<http::Request<Body>> {
        if is_eviction(req) {
            return None;
        }
        <RetryPolicy as tower::retry::Policy<
            http::Request<Body>,
            http::Response<Res>,
            tower::BoxError,
        >>::clone_request(&mut self.0, req)
    }
}

pub fn client(config: kube::Config) -> anyhow::Result<kube::Client> {
    let tls = config
        .rustls_client_config()
        .context("TLS settings for the API server")?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let http: HttpClient<_, Body> = HttpClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        // A dead connection would otherwise stall every watch on it.
        .http2_keep_alive_interval(Some(Duration::from_secs(30)))
        .http2_keep_alive_timeout(Duration::from_secs(10))
        .http2_keep_alive_while_idle(true)
        // Initial lists of thousands of pods arrive on the same connection.
        .http2_adaptive_window(true)
        .build(https);
    // As kube's own client: 429, 503 and 504 are retried with backoff,
    // honouring Retry-After (API Priority and Fairness answers 429).
    let retry = config
        .default_retry
        .then(|| RetryLayer::new(Retry(RetryPolicy::server_retry())));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().context("API server credentials")?)
        .layer(config.extra_headers_layer().context("extra headers")?)
        .map_err(tower::BoxError::from)
        .layer(tower::timeout::TimeoutLayer::new(REQUEST_TIMEOUT))
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace))
}
