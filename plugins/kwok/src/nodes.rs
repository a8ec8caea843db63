//! Node objects through the Kubernetes API: kwok's "instances".

use crate::{GROUP, PROVIDER_ID_SCHEME};
use karpenter_plugin_sdk::http::{Request, Response, encode};
use karpenter_plugin_sdk::prelude::*;
use serde_json::{Value, json};

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
        200 => Ok(Some(instance(&response.json::<Value>()?))),
        status => Err(fatal(format!(
            "get node {name}: {status}: {}",
            response.text()
        ))),
    }
}

pub fn list() -> Result<Vec<Instance>, Error> {
    let selector = encode(&format!("{MANAGED_LABEL}=true"));
    let response = send(Request::get(api(&format!(
        "/api/v1/nodes?labelSelector={selector}"
    ))))?;
    if !response.is_success() {
        return Err(fatal(format!(
            "list nodes: {}: {}",
            response.status,
            response.text()
        )));
    }
    let list: Value = response.json()?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    let mut out: Vec<Instance> = items.iter().map(instance).collect();
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
    let mut taints: Vec<Value> = claim
        .taints
        .iter()
        .chain(&claim.startup_taints)
        .map(taint)
        .collect();
    taints.push(json!({"key": labels::UNREGISTERED_TAINT, "effect": "NoExecute"}));
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
        200 | 201 => Ok(instance(&response.json::<Value>()?)),
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
    let effect = match t.effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    };
    json!({"key": t.key, "value": t.value, "effect": effect})
}

fn instance(node: &Value) -> Instance {
    let meta = &node["metadata"];
    let label_map = meta["labels"].as_object().cloned().unwrap_or_default();
    let node_labels: Vec<(String, String)> = label_map
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let label = |k: &str| {
        label_map
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let resources = |field: &str| -> Vec<(String, String)> {
        node["status"][field]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let state = if meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()) {
        InstanceState::Stopping
    } else {
        InstanceState::Running
    };
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    Instance {
        node_claim: name,
        node_pool: label(labels::NODE_POOL),
        provider_id: node["spec"]["providerID"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        image_id: "kwok".into(),
        instance_type: label(labels::INSTANCE_TYPE),
        zone: label(labels::ZONE),
        capacity_type: label(labels::CAPACITY_TYPE),
        state,
        labels: node_labels,
        capacity: resources("capacity"),
        allocatable: resources("allocatable"),
        created_at: meta["creationTimestamp"].as_str().map(str::to_string),
    }
}
