//! Objects for unit tests, built the way the API server would return them:
//! a NodeClaim `a` has uid, providerID `test://a` and the termination
//! finalizer; its Node `a` has the same providerID.

use crate::crds::NodeClaim;
use crate::slim::Node;
use serde_json::{Value, json};
use std::sync::Arc;

pub struct Object(Value);

/// A launched NodeClaim of NodePool `default`.
pub fn claim(name: &str) -> Object {
    Object(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": format!("00000000-0000-4000-8000-{:012x}", fnv(name)),
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"karpenter.sh/nodepool": "default"},
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.test", "kind": "TestNodeClass", "name": "default"},
            "requirements": [],
        },
        "status": {"providerID": format!("test://{name}")},
    }))
}

/// The Node a kubelet registers for NodeClaim `name`.
pub fn node(name: &str) -> Object {
    Object(json!({
        "metadata": {
            "name": name,
            "resourceVersion": "3",
            "labels": {"kubernetes.io/hostname": name},
        },
        "spec": {"providerID": format!("test://{name}"), "taints": []},
    }))
}

/// A NodePool whose template carries a label, an annotation, a taint, a
/// startup taint and an expiry.
pub fn node_pool(name: &str) -> Object {
    Object(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": format!("00000000-0000-4000-8000-{:012x}", fnv(name))},
        "spec": {"template": {
            "metadata": {"labels": {"team": "web"}, "annotations": {"example.com/owner": "web"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.test", "kind": "TestNodeClass", "name": "default"},
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}],
                "expireAfter": "720h",
            },
        }},
    }))
}

impl Object {
    pub fn deleting(mut self) -> Self {
        self.0["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:10:00Z");
        self
    }

    pub fn finalizers(mut self, f: &[&str]) -> Self {
        self.0["metadata"]["finalizers"] = json!(f);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["labels"][key] = json!(value);
        self
    }

    /// A Node's taint, or a NodeClaim's `spec.taints`.
    pub fn taint(self, key: &str, effect: &str) -> Self {
        self.push_taint("taints", key, effect)
    }

    pub fn startup_taint(self, key: &str, effect: &str) -> Self {
        self.push_taint("startupTaints", key, effect)
    }

    fn push_taint(mut self, field: &str, key: &str, effect: &str) -> Self {
        let list = &mut self.0["spec"][field];
        if list.is_null() {
            *list = json!([]);
        }
        if let Some(list) = list.as_array_mut() {
            list.push(json!({"key": key, "effect": effect}));
        }
        self
    }

    /// A Node whose kubelet reports it Ready.
    pub fn ready(mut self) -> Self {
        self.0["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        self
    }

    pub fn no_provider_id(mut self) -> Self {
        for part in ["spec", "status"] {
            if let Some(o) = self.0[part].as_object_mut() {
                o.remove("providerID");
            }
        }
        self
    }

    pub fn build<T: serde::de::DeserializeOwned>(self) -> T {
        serde_json::from_value(self.0).expect("a valid object")
    }

    pub fn claim(self) -> Arc<NodeClaim> {
        Arc::new(self.build())
    }

    pub fn node(self) -> Arc<Node> {
        Arc::new(self.build())
    }
}

/// A stable number from a name, so each fixture has its own uid.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3) & 0xffff_ffff_ffff
    })
}
