//! `karpenter:provider/cluster`: the little a provider needs to know about
//! the cluster. The controller keeps it current from its reflectors.

use crate::bindings::v0_1_4::karpenter::provider::cluster::{ClusterInfo, Host};
use crate::state::State;
use std::sync::RwLock;

#[derive(Default)]
pub struct ClusterView {
    info: RwLock<(String, String, String)>,
    node_ips: RwLock<Vec<String>>,
}

impl ClusterView {
    pub fn new(name: &str, endpoint: &str, ca_bundle: &str) -> Self {
        let view = ClusterView::default();
        view.set_info(name, endpoint, ca_bundle);
        view
    }

    pub fn set_info(&self, name: &str, endpoint: &str, ca_bundle: &str) {
        *self.info.write().unwrap_or_else(|e| e.into_inner()) = (
            name.to_string(),
            endpoint.to_string(),
            ca_bundle.to_string(),
        );
    }

    /// The API endpoint and its CA bundle.
    pub fn endpoint_and_ca(&self) -> (String, String) {
        let info = self.info.read().unwrap_or_else(|e| e.into_inner());
        (info.1.clone(), info.2.clone())
    }

    pub fn set_node_internal_ips(&self, mut ips: Vec<String>) {
        ips.sort();
        ips.dedup();
        *self.node_ips.write().unwrap_or_else(|e| e.into_inner()) = ips;
    }
}

impl Host for State {
    async fn info(&mut self) -> ClusterInfo {
        let (name, endpoint, ca_bundle) = self
            .caps
            .cluster
            .info
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ClusterInfo {
            name,
            endpoint,
            ca_bundle,
        }
    }

    async fn node_internal_ips(&mut self) -> Vec<String> {
        self.caps
            .cluster
            .node_ips
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
