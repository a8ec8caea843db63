//! Reading Kubernetes YAML: NodePools, NodeOverlays, NodeClasses (any kind
//! a plugin serves), Pods, workloads expanded to their replicas, Nodes, DaemonSets and
//! PodDisruptionBudgets.

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_controller::crds::{NodeOverlay, NodePool};
use karpenter_controller::slim::Node;
use serde_json::Value;

/// A workload: its pods' template and how many.
pub struct Workload {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub template: PodTemplateSpec,
    pub replicas: i32,
}

#[derive(Default)]
pub struct Manifests {
    pub node_pools: Vec<NodePool>,
    pub node_overlays: Vec<NodeOverlay>,
    /// Objects of other API groups: NodeClasses, matched to plugins later.
    pub node_classes: Vec<Value>,
    pub pods: Vec<Pod>,
    /// Deployments, ReplicaSets and StatefulSets, expanded against the
    /// cluster's pods (`super::state`).
    pub workloads: Vec<Workload>,
    pub nodes: Vec<Node>,
    pub daemon_sets: Vec<DaemonSet>,
    pub pdbs: Vec<PodDisruptionBudget>,
}

impl Manifests {
    /// Adds every document of one YAML stream; `source` names it in errors.
    pub fn add_yaml(&mut self, source: &str, text: &str) -> anyhow::Result<()> {
        // Kubernetes' YAML reading: merge keys and YAML 1.1 booleans as
        // kubectl reads them.
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(text).with_context(|| source.to_string())?;
        for (i, value) in docs.into_iter().enumerate() {
            if value.is_null() {
                continue;
            }
            self.add(value)
                .with_context(|| format!("{source}: document {}", i + 1))?;
        }
        Ok(())
    }

    fn add(&mut self, value: Value) -> anyhow::Result<()> {
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        let api = value["apiVersion"].as_str().unwrap_or_default().to_string();
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let parse = |what: &str| format!("{what} {name:?}");
        match (api.as_str(), kind.as_str()) {
            (_, "List") => {
                for item in value["items"].as_array().cloned().unwrap_or_default() {
                    self.add(item)?;
                }
            }
            ("karpenter.sh/v1", "NodePool") => self
                .node_pools
                .push(serde_json::from_value(value).with_context(|| parse("NodePool"))?),
            ("karpenter.sh/v1alpha1", "NodeOverlay") => self
                .node_overlays
                .push(serde_json::from_value(value).with_context(|| parse("NodeOverlay"))?),
            ("v1", "Pod") => self
                .pods
                .push(serde_json::from_value(value).with_context(|| parse("Pod"))?),
            ("v1", "Node") => self
                .nodes
                .push(serde_json::from_value(value).with_context(|| parse("Node"))?),
            ("apps/v1", "DaemonSet") => self
                .daemon_sets
                .push(serde_json::from_value(value).with_context(|| parse("DaemonSet"))?),
            ("policy/v1", "PodDisruptionBudget") => self
                .pdbs
                .push(serde_json::from_value(value).with_context(|| parse("PodDisruptionBudget"))?),
            ("apps/v1", "Deployment") => {
                let d: Deployment =
                    serde_json::from_value(value).with_context(|| parse("Deployment"))?;
                let spec = d.spec;
                self.workload("Deployment", &d.metadata, spec.template, spec.replicas);
            }
            ("apps/v1", "ReplicaSet") => {
                let r: ReplicaSet =
                    serde_json::from_value(value).with_context(|| parse("ReplicaSet"))?;
                let spec = r.spec;
                let template = spec.template.unwrap_or_default();
                self.workload("ReplicaSet", &r.metadata, template, spec.replicas);
            }
            ("apps/v1", "StatefulSet") => {
                let s: StatefulSet =
                    serde_json::from_value(value).with_context(|| parse("StatefulSet"))?;
                let spec = s.spec;
                self.workload("StatefulSet", &s.metadata, spec.template, spec.replicas);
            }
            ("v1", "Namespace" | "ServiceAccount" | "Service" | "ConfigMap" | "Secret") => {}
            (api, _) if api.starts_with("karpenter.sh/") => {
                bail!("unsupported karpenter.sh object {api} {kind}")
            }
            (api, _) if api.contains('.') && api.contains('/') => self.node_classes.push(value),
            _ => bail!("unsupported object {api} {kind} {name:?}"),
        }
        Ok(())
    }

    fn workload(
        &mut self,
        kind: &'static str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        template: PodTemplateSpec,
        replicas: Option<i32>,
    ) {
        self.workloads.push(Workload {
            kind,
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
            name: meta.name.clone().unwrap_or_default(),
            template,
            replicas: replicas.unwrap_or(1).max(0),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Users' manifests share blocks through anchors and merge keys, which
    /// kubectl expands; so does `simulate`.
    #[test]
    fn anchors_and_merge_keys_expand_as_kubectl_expands_them() {
        // Anchors live within one document, as YAML defines them.
        let text = r#"
apiVersion: v1
kind: List
items:
- apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: first}
  spec:
    template:
      spec:
        nodeClassRef: &class {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
        requirements: &reqs
          - {key: kubernetes.io/arch, operator: In, values: [amd64]}
    limits: &limits {cpu: "100"}
- apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: second}
  spec:
    template:
      spec:
        nodeClassRef: *class
        requirements: *reqs
    limits:
      <<: *limits
      memory: 100Gi
---
"#;
        let mut m = Manifests::default();
        m.add_yaml("pools.yaml", text).expect("valid");
        assert_eq!(m.node_pools.len(), 2);
        let second = serde_json::to_value(&m.node_pools[1]).expect("json");
        assert_eq!(second["spec"]["limits"]["cpu"], "100");
        assert_eq!(second["spec"]["limits"]["memory"], "100Gi");
        assert_eq!(
            second["spec"]["template"]["spec"]["requirements"][0]["values"][0],
            "amd64"
        );
        let err = m
            .add_yaml("broken.yaml", "kind: [Pod\n")
            .expect_err("unclosed");
        assert!(format!("{err:#}").contains("broken.yaml"), "{err:#}");
    }
}
