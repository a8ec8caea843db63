//! The objects a scenario applies: NodePools on the shared KWOKNodeClass and
//! Deployments of pause pods that kwok runs.

use serde_json::{Value, json};

pub const NAMESPACE: &str = "peer";
/// Every workload pod carries this label.
pub const POD_LABEL: (&str, &str) = ("peer.example.com/workload", "true");

pub fn node_class() -> Value {
    json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}})
}

/// Karpenter reads a NodeClass's readiness from its status; its KWOK provider
/// runs no controller that sets it (its own test environment sets it), so the
/// harness does, for both.
pub fn node_class_ready_status() -> Value {
    json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1
    }]}})
}

pub struct Pool {
    pub name: String,
    pub weight: Option<u32>,
    pub consolidate_after: &'static str,
    pub requirements: Vec<Value>,
    pub labels: Vec<(String, String)>,
}

impl Pool {
    /// Karpenter's performance suite's NodePool: Linux, on-demand, every
    /// budget open, no expiry, no limits. Any limit would skew the match:
    /// Karpenter counts a NodeClaim it plans at its largest instance type,
    /// so with this catalog's 1.5 TiB types even a limit far above the
    /// workload stops its batches early.
    pub fn default_named(name: &str, consolidate_after: &'static str) -> Pool {
        Pool {
            name: name.into(),
            weight: None,
            consolidate_after,
            requirements: Vec::new(),
            labels: Vec::new(),
        }
    }

    pub fn manifest(&self) -> Value {
        let mut requirements = vec![
            json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}),
            json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
        ];
        requirements.extend(self.requirements.iter().cloned());
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": self.name},
            "spec": {
                "disruption": {
                    "consolidationPolicy": "WhenEmptyOrUnderutilized",
                    "consolidateAfter": self.consolidate_after,
                    "budgets": [{"nodes": "100%"}]
                },
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "expireAfter": "Never",
                        "requirements": requirements,
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
                    }
                }
            }
        });
        if let Some(w) = self.weight {
            pool["spec"]["weight"] = json!(w);
        }
        pool
    }
}

#[derive(Clone)]
pub struct App {
    pub name: String,
    pub replicas: u32,
    pub cpu: &'static str,
    pub memory: &'static str,
    pub hostname_spread: bool,
    pub do_not_disrupt: bool,
    pub node_selector: Vec<(String, String)>,
}

impl App {
    pub fn new(name: &str, replicas: u32, cpu: &'static str, memory: &'static str) -> App {
        App {
            name: name.into(),
            replicas,
            cpu,
            memory,
            hostname_spread: false,
            do_not_disrupt: false,
            node_selector: Vec::new(),
        }
    }

    pub fn manifest(&self) -> Value {
        let labels = json!({"app": self.name, POD_LABEL.0: POD_LABEL.1});
        let mut pod = json!({
            "metadata": {"labels": labels},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "app", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}}
                }]
            }
        });
        if self.hostname_spread {
            pod["spec"]["topologySpreadConstraints"] = json!([{
                "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": self.name}}
            }]);
        }
        if self.do_not_disrupt {
            pod["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        }
        if !self.node_selector.is_empty() {
            let sel: serde_json::Map<String, Value> = self
                .node_selector
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            pod["spec"]["nodeSelector"] = Value::Object(sel);
        }
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": self.name, "namespace": NAMESPACE},
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": {"app": self.name}},
                "template": pod
            }
        })
    }
}
