//! Keeps the plugins' cluster view of Node InternalIPs (the `cluster`
//! capability's `node-internal-ips`) in step with the Node watcher, so a
//! provider picking node addresses sees the ones in use.

use super::cluster::NodeChange;
use crate::slim::Node;
use karpenter_runtime::capabilities::cluster::ClusterView;
use kube::runtime::reflector::Store;
use std::sync::Arc;
use tokio::sync::broadcast;

pub fn internal_ips(nodes: &[Arc<Node>]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.addresses.as_ref())
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .collect()
}

pub async fn run(
    nodes: Store<Node>,
    mut events: broadcast::Receiver<NodeChange>,
    view: Arc<ClusterView>,
) {
    loop {
        view.set_node_internal_ips(internal_ips(&nodes.state()));
        match events.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_internal_addresses() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"addresses": [
                {"type": "Hostname", "address": "n"},
                {"type": "InternalIP", "address": "100.96.1.237"},
                {"type": "ExternalIP", "address": "20.0.0.1"}
            ]}
        }))
        .expect("node");
        assert_eq!(internal_ips(&[Arc::new(n)]), ["100.96.1.237"]);
    }
}
