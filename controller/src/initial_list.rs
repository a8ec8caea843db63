//! How the watchers learn what exists when they start, and again after a
//! watch falls too far behind ("too old resource version").
//!
//! A LIST with `resourceVersion=0` is served from the API server's cache,
//! which ignores the page size: all 10,000 pods of a large cluster arrive
//! as one response of tens of MB, held whole while it is parsed. A watch
//! with `sendInitialEvents` (Kubernetes' WatchList feature, beta and on in
//! the 1.35 API server the tests run) sends the same objects one event each.

use crate::crds::NodePool;
use futures::TryStreamExt;
use kube::api::{WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialList {
    /// A watch that first sends every current object, then marks the end.
    Streaming,
    /// A LIST, then a watch from its resource version.
    List,
}

impl InitialList {
    /// Streaming if the API server streams the NodePools and marks the end
    /// of them. Servers with WatchList off refuse the parameter; servers
    /// older than 1.27 ignore it and would never mark the end.
    pub async fn probe(client: &Client) -> InitialList {
        let api = Api::<NodePool>::all(client.clone());
        let marks_the_end = async {
            let events = api
                .watch(&WatchParams::streaming_lists().timeout(5), "0")
                .await?;
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.try_next().await? {
                if let WatchEvent::Bookmark(b) = event {
                    let end = b.metadata.annotations.get("k8s.io/initial-events-end");
                    return Ok(end.is_some_and(|v| v == "true"));
                }
            }
            Ok::<_, kube::Error>(false)
        };
        let why_not = match tokio::time::timeout(Duration::from_secs(10), marks_the_end).await {
            Ok(Ok(true)) => return InitialList::Streaming,
            Ok(Ok(false)) => "it does not mark the end of initial events".to_string(),
            Ok(Err(e)) => format!("it refused: {e}"),
            Err(_) => "no initial events in 10 s".to_string(),
        };
        tracing::info!(reason = %why_not, "the API server does not stream initial lists; listing");
        InitialList::List
    }

    pub fn config(self) -> watcher::Config {
        let config = watcher::Config::default();
        match self {
            InitialList::Streaming => config.streaming_lists(),
            InitialList::List => config.any_semantic(),
        }
    }
}
