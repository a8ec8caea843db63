//! Plugins' HTTP goes through the host's client: HTTP/2 where the endpoint
//! speaks it (gRPC needs it), HTTP/1.1 elsewhere, only to allowed hosts.

use crate::common;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use karpenter_controller::records;
use karpenter_runtime::{PluginConfig, wit};
use std::collections::BTreeMap;
use std::convert::Infallible;
use tokio::net::TcpListener;

/// A server that answers with the HTTP version it received.
async fn server(http2_only: bool) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(format!(
                        "{:?}",
                        req.version()
                    )))))
                });
                let io = TokioIo::new(stream);
                if http2_only {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    addr
}

async fn fetch(url: &str, tune: impl FnOnce(&mut PluginConfig)) -> String {
    fetch_in(&common::runtime(), url, tune).await
}

async fn fetch_in(
    runtime: &std::sync::Arc<karpenter_runtime::Runtime>,
    url: &str,
    tune: impl FnOnce(&mut PluginConfig),
) -> String {
    let mut config = PluginConfig {
        settings: BTreeMap::from([
            ("MODE".into(), "fetch".into()),
            ("URL".into(), url.to_string()),
        ]),
        ..PluginConfig::default()
    };
    tune(&mut config);
    let plugin = runtime
        .load("fetch", &common::plugin_wasm("misbehave"), config)
        .await
        .expect("loads");
    let pool = records::bare_node_pool(
        "p",
        wit::NodeClassRef {
            group: "g".into(),
            kind: "k".into(),
            name: "n".into(),
        },
    );
    let class = wit::NodeClass {
        name: "n".into(),
        generation: 1,
        json: "{}".into(),
    };
    plugin
        .get_instance_types(&pool, &class)
        .await
        .expect_err("fetch reports through an error")
        .to_string()
}

#[tokio::test]
async fn cleartext_http2_by_prior_knowledge_for_configured_hosts() {
    let addr = server(true).await;
    let text = fetch(&format!("http://{addr}/v1/operations"), |c| {
        c.allowed_hosts = vec![format!("http://{addr}")];
        c.h2c_hosts = vec![addr.to_string()];
    })
    .await;
    assert!(text.ends_with("fetched 200 HTTP/2.0"), "{text}");
}

#[tokio::test]
async fn http1_elsewhere() {
    let addr = server(false).await;
    let text = fetch(&format!("http://{addr}/"), |c| {
        c.allowed_hosts = vec![format!("http://127.0.0.1:{}", addr.port())]
    })
    .await;
    assert!(text.ends_with("fetched 200 HTTP/1.1"), "{text}");
}

#[tokio::test]
async fn the_port_is_part_of_the_allow_list() {
    let addr = server(false).await;
    let text = fetch(&format!("http://{addr}/"), |c| {
        c.allowed_hosts = vec!["http://127.0.0.1:1".into()]
    })
    .await;
    assert!(text.contains("denied by the host"), "{text}");
}

#[tokio::test]
async fn the_cluster_ca_is_trusted_for_the_cluster_endpoint_alone() {
    let server =
        common::https::FileServer::start(BTreeMap::from([("/hello".to_string(), b"hi".to_vec())]))
            .await;
    let url = format!("{}/hello", server.base);
    let allow = |c: &mut PluginConfig| c.allowed_hosts = vec![server.base.clone()];
    let with_cluster = |endpoint: &str| {
        common::runtime_with(karpenter_runtime::RuntimeOptions {
            cluster: std::sync::Arc::new(
                karpenter_runtime::capabilities::cluster::ClusterView::new(
                    "c",
                    endpoint,
                    &server.ca_pem,
                ),
            ),
            ..Default::default()
        })
    };
    // The server's certificate is signed by the cluster's CA, but it is not
    // the cluster's API endpoint.
    let elsewhere = fetch_in(&with_cluster("https://127.0.0.1:1"), &url, allow).await;
    assert!(!elsewhere.contains("fetched 200"), "{elsewhere}");
    // As the cluster's endpoint, it is trusted.
    let api = fetch_in(&with_cluster(&server.base), &url, allow).await;
    assert!(api.contains("fetched 200 hi"), "{api}");
}
