//! A local HTTP server that answers the kwok provider's Node calls after a
//! fixed delay, standing in for a cloud API whose launches take time. It
//! measures what the plugin runtime adds while many calls wait on HTTP.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// Starts the server on 127.0.0.1; it runs until the runtime stops.
/// `GET` answers 404 at once (no such Node yet); `POST` answers 201 with the
/// posted object after `delay`.
pub async fn start(delay: Duration) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = service_fn(move |req| handle(req, delay));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn handle(
    req: Request<Incoming>,
    delay: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let respond = |status: StatusCode, body: Bytes| {
        let mut r = Response::new(Full::new(body));
        *r.status_mut() = status;
        r.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    };
    match *req.method() {
        hyper::Method::POST => {
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            tokio::time::sleep(delay).await;
            Ok(respond(StatusCode::CREATED, body))
        }
        _ => Ok(respond(
            StatusCode::NOT_FOUND,
            Bytes::from_static(br#"{"kind":"Status","code":404}"#),
        )),
    }
}
