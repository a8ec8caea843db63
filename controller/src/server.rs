//! The controller's HTTP endpoints: /metrics (Prometheus text), /healthz
//! (the process is alive) and /readyz (the watchers have synced and the
//! plugins have loaded).

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;

pub struct Endpoints {
    pub registry: Registry,
    pub ready: AtomicBool,
}

/// Serves `endpoints` on `addr` until the process ends; returns the bound
/// address (port 0 picks a free one).
pub async fn serve(addr: SocketAddr, endpoints: Arc<Endpoints>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let endpoints = endpoints.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(req, endpoints.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

async fn handle(
    req: Request<Incoming>,
    endpoints: Arc<Endpoints>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, &endpoints.registry) {
                Ok(()) => (
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ),
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    e.to_string(),
                ),
            }
        }
        "/healthz" => (StatusCode::OK, "text/plain", "ok".into()),
        "/readyz" if endpoints.ready.load(Ordering::Relaxed) => {
            (StatusCode::OK, "text/plain", "ok".into())
        }
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "watchers not synced".into(),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".into()),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert("content-type", v);
    }
    Ok(r)
}
