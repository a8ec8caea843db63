//! Node objects through the Kubernetes API: kwok's "instances".

use crate::{GROUP, PROVIDER_ID_SCHEME};
use karpenter_plugin_sdk::http::{Request, Response, encode};
use karpenter_plugin_sdk::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Marks the Nodes this provider made, so List finds only those.
const MANAGED_LABEL: &str = "karpenter.kwok.sh/managed";

fn api(path: &str) -> String {
    let endpoint = cluster::info().endpoint;
    format!("{}{path}", endpoint.trim_end_matches('/'))
}

fn token() -> Result<String, Error> {
    let name = config::get_setting("TOKEN_SECRET").unwrap_or_else(|| "kube/token".into());
    let bytes = config::get_secret(&name).map_err(|e| fatal(format!("API server token: {e}")))?;
    Ok(String::from_utf8_lossy(&bytes).trim().to_string())
}

fn send(request: Request) -> Result<Response, Error> {
    let response = request
        .bearer(&token()?)
        .header("accept", "application/json")
        .send()?;
    if response.status == 429 || response.status >= 500 {
        return Err(retryable(format!(
            "API server answered {}: {}",
            response.status,
            response.text()
        )));
    }
    Ok(response)
}

pub fn name_from_provider_id(provider_id: &str) -> Result<String, Error> {
    provider_id
        .strip_prefix(&format!("{PROVIDER_ID_SCHEME}://"))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            fatal(format!(
                "providerID {provider_id:?} is not of the form kwok://<node>"
            ))
        })
}

pub fn get(name: &str) -> Result<Option<Instance>, Error> {
    let response = send(Request::get(api(&format!("/api/v1/nodes/{name}"))))?;
    match response.status {
        404 => Ok(None),
        200 => Ok(Some(instance(response.json::<Node>()?))),
        status => Err(fatal(format!(
            "get node {name}: {status}: {}",
            response.text()
        ))),
    }
}

/// Nodes per page of a list. Pages keep the instance's memory small: a
/// linear memory never shrinks, and a Node with its managed fields is
/// kilobytes of JSON, read whole before it is parsed.
const PAGE: usize = 50;

pub fn list() -> Result<Vec<Instance>, Error> {
    list_selected(None)
}

/// The Nodes this provider made, those matching `selector` if given.
pub fn list_selected(selector: Option<&str>) -> Result<Vec<Instance>, Error> {
    let selector = match selector {
        Some(s) => encode(&format!("{MANAGED_LABEL}=true,{s}")),
        None => encode(&format!("{MANAGED_LABEL}=true")),
    };
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let mut path = format!("/api/v1/nodes?labelSelector={selector}&limit={PAGE}");
        if !token.is_empty() {
            path.push_str(&format!("&continue={}", encode(&token)));
        }
        let response = send(Request::get(api(&path)))?;
        if !response.is_success() {
            return Err(fatal(format!(
                "list nodes: {}: {}",
                response.status,
                response.text()
            )));
        }
        let page: NodeList = response.json()?;
        out.extend(page.items.into_iter().map(instance));
        match page.metadata.continue_token {
            Some(next) if !next.is_empty() => token = next,
            _ => break,
        }
    }
    out.sort_by(|a, b| a.provider_id.cmp(&b.provider_id));
    Ok(out)
}

pub fn create(
    claim: &NodeClaim,
    it: &InstanceType,
    mut node_labels: Vec<(String, String)>,
) -> Result<Instance, Error> {
    node_labels.push((MANAGED_LABEL.into(), "true".into()));
    let labels_json: serde_json::Map<String, Value> = node_labels
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let taints: Vec<Value> = node_taints(claim).iter().map(taint).collect();
    let capacity: serde_json::Map<String, Value> = it
        .capacity
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": claim.name,
            "labels": labels_json,
            "annotations": {"kwok.x-k8s.io/node": "fake", format!("{GROUP}/nodeclaim"): claim.name},
        },
        "spec": {"providerID": format!("{PROVIDER_ID_SCHEME}://{}", claim.name), "taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity, "phase": "Pending"},
    });
    let response = send(Request::post(api("/api/v1/nodes")).json(&node)?)?;
    match response.status {
        200 | 201 => Ok(instance(response.json::<Node>()?)),
        // Created by an earlier attempt: return what exists, never a second one.
        409 => get(&claim.name)?
            .ok_or_else(|| retryable(format!("node {} conflicts but is gone", claim.name))),
        status => Err(create_error(
            "NodeCreateFailed",
            format!("{status}: {}", response.text()),
            false,
        )),
    }
}

pub fn delete(name: &str) -> Result<(), Error> {
    let response = send(Request::delete(api(&format!("/api/v1/nodes/{name}"))))?;
    match response.status {
        404 => Err(not_found(format!("node {name} does not exist"))),
        200 | 202 => Ok(()),
        status => Err(fatal(format!(
            "delete node {name}: {status}: {}",
            response.text()
        ))),
    }
}

fn taint(t: &Taint) -> Value {
    let effect = karpenter_plugin_sdk::node::effect_name(t.effect);
    json!({"key": t.key, "value": t.value, "effect": effect})
}

/// The parts of a Node an instance is made of; serde skips the rest
/// (conditions, images, ...) without building it.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Node {
    metadata: NodeMeta,
    spec: NodeSpec,
    status: NodeStatus,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NodeMeta {
    name: String,
    labels: BTreeMap<String, String>,
    creation_timestamp: Option<String>,
    deletion_timestamp: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeSpec {
    #[serde(rename = "providerID")]
    provider_id: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeStatus {
    capacity: BTreeMap<String, String>,
    allocatable: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NodeList {
    metadata: ListMeta,
    items: Vec<Node>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListMeta {
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

fn instance(node: Node) -> Instance {
    let Node {
        metadata: meta,
        spec,
        status,
    } = node;
    let label = |k: &str| meta.labels.get(k).cloned().unwrap_or_default();
    let state = if meta.deletion_timestamp.is_some() {
        InstanceState::Stopping
    } else {
        InstanceState::Running
    };
    Instance {
        node_pool: label(labels::NODE_POOL),
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: label(labels::CAPACITY_TYPE),
        node_claim: meta.name,
        provider_id: spec.provider_id,
        image_id: "kwok".into(),
        state,
        // The kubelet's own label is not the instance's to report.
        labels: meta
            .labels
            .into_iter()
            .filter(|(k, _)| k != labels::HOSTNAME)
            .collect(),
        capacity: status.capacity.into_iter().collect(),
        allocatable: status.allocatable.into_iter().collect(),
        created_at: meta.creation_timestamp,
    }
}
