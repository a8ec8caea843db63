//! Edits to a Node as JSON patches that keep what others changed. Kubelets
//! and the node lifecycle controller write Nodes all the time, so an edit is
//! not tied to a resourceVersion: it is computed from a copy at hand (the
//! watch's, mostly), tests each list item it removes where it was seen,
//! appends the rest, and is computed again from a fresh read only when the
//! API server refuses it (a failed test, or an append that would repeat a
//! taint the copy did not show yet).

use crate::slim::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const TRIES: usize = 5;

/// Applies the ops `edit` computes from `seen`, then from fresh reads while
/// the API server refuses them. The Node as edited (the API server's answer,
/// or the copy that needed no edit); `None` when it is gone.
pub(crate) async fn apply(
    api: &Api<Node>,
    seen: &Node,
    edit: impl Fn(&Node) -> Vec<Value>,
) -> anyhow::Result<Option<Node>> {
    let name = seen.name_any();
    let mut fresh: Option<Node> = None;
    for _ in 0..TRIES {
        let ops = edit(fresh.as_ref().unwrap_or(seen));
        if ops.is_empty() {
            return Ok(Some(fresh.unwrap_or_else(|| seen.clone())));
        }
        let ops: json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
        match api
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(ops))
            .await
        {
            Ok(edited) => return Ok(Some(edited)),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            // A failed test is 422, as an invalid patch would be: read the
            // Node again either way; an invalid patch fails every try.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => {
                tracing::debug!(node = %name, error = %e.message, "node changed under a patch; reading it again");
                match api.get_opt(&name).await? {
                    Some(n) => fresh = Some(n),
                    None => return Ok(None),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!("node {name} kept changing; will retry")
}

/// Ops that drop the items `drop` picks from the list at `path` and append
/// `append`. Each dropped item is tested where it was seen, then removed,
/// last first; appends go to the end. So another writer's change elsewhere
/// in the list (the node lifecycle controller's not-ready taints) does not
/// fail the patch, and one that moved a dropped item does. An absent list
/// is tested absent and made.
pub(crate) fn list_ops<T: serde::Serialize>(
    ops: &mut Vec<Value>,
    path: &str,
    have: Option<&[T]>,
    drop: impl Fn(&T) -> bool,
    append: &[T],
) {
    let Some(have) = have else {
        if !append.is_empty() {
            ops.push(json!({"op": "test", "path": path, "value": null}));
            ops.push(json!({"op": "add", "path": path, "value": append}));
        }
        return;
    };
    for (i, item) in have.iter().enumerate().rev().filter(|(_, t)| drop(t)) {
        let at = format!("{path}/{i}");
        ops.push(json!({"op": "test", "path": at, "value": item}));
        ops.push(json!({"op": "remove", "path": at}));
    }
    for item in append {
        ops.push(json!({"op": "add", "path": format!("{path}/-"), "value": item}));
    }
}

/// Ops that drop the taints `drop` picks and append `append`.
pub(crate) fn taint_ops(
    node: &Node,
    drop: impl Fn(&k8s_openapi::api::core::v1::Taint) -> bool,
    append: &[k8s_openapi::api::core::v1::Taint],
) -> Vec<Value> {
    let mut ops = Vec::new();
    let have = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    list_ops(&mut ops, "/spec/taints", have, drop, append);
    ops
}

/// Ops that drop `finalizer`.
pub(crate) fn drop_finalizer(node: &Node, finalizer: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    let have = node.metadata.finalizers.as_deref();
    list_ops(
        &mut ops,
        "/metadata/finalizers",
        have,
        |f| f == finalizer,
        &[],
    );
    ops
}

/// `ops` applied as the API server applies a JSON patch, where a test of
/// null holds a member absent.
#[cfg(test)]
pub(crate) fn apply_locally(node: &Node, ops: &[Value]) -> Result<Node, String> {
    let mut doc = serde_json::to_value(node).expect("node json");
    for op in ops {
        if op["op"] == "test" && op["value"].is_null() {
            let path = op["path"].as_str().expect("path");
            if doc.pointer(path).is_some_and(|v| !v.is_null()) {
                return Err(format!("{path} is present"));
            }
            continue;
        }
        let one: json_patch::Patch = serde_json::from_value(json!([op])).expect("an operation");
        json_patch::patch(&mut doc, &one).map_err(|e| e.to_string())?;
    }
    serde_json::from_value(doc).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vocabulary::labels::TERMINATION_FINALIZER;

    #[test]
    fn a_finalizer_goes_where_it_was_seen_and_others_stay() {
        let seen: Node = fixtures::node("a")
            .finalizers(&["example.com/csi", TERMINATION_FINALIZER])
            .build();
        let ops = drop_finalizer(&seen, TERMINATION_FINALIZER);
        let done = apply_locally(&seen, &ops).expect("applies");
        assert_eq!(done.finalizers(), ["example.com/csi"]);
        assert!(drop_finalizer(&done, TERMINATION_FINALIZER).is_empty());
        // Another writer dropped its own finalizer meanwhile: the index moved,
        // so the test fails and the edit is made again from a fresh read.
        let now: Node = fixtures::node("a")
            .finalizers(&[TERMINATION_FINALIZER])
            .build();
        assert!(apply_locally(&now, &ops).is_err());
        let again = apply_locally(&now, &drop_finalizer(&now, TERMINATION_FINALIZER));
        assert_eq!(again.expect("applies").finalizers(), [] as [&str; 0]);
    }

    #[test]
    fn a_taint_is_appended_to_what_the_node_has_now() {
        use k8s_openapi::api::core::v1::Taint;
        let disrupted = Taint {
            key: "karpenter.sh/disrupted".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let mut bare: Node = fixtures::node("a").build();
        if let Some(spec) = bare.spec.as_mut() {
            spec.taints = None;
        }
        let ops = taint_ops(&bare, |_| false, std::slice::from_ref(&disrupted));
        let tainted = apply_locally(&bare, &ops).expect("applies");
        assert_eq!(tainted.taints().len(), 1);
        // A taint another writer added since the copy was taken: the list is
        // no longer absent, so the edit is made again from a fresh read.
        let now: Node = fixtures::node("a")
            .taint("node.kubernetes.io/not-ready", "NoSchedule")
            .build();
        assert!(apply_locally(&now, &ops).is_err());
        let again =
            apply_locally(&now, &taint_ops(&now, |_| false, &[disrupted])).expect("applies");
        let keys = |n: &Node| n.taints().iter().map(|t| t.key.clone()).collect::<Vec<_>>();
        assert_eq!(
            keys(&again),
            ["node.kubernetes.io/not-ready", "karpenter.sh/disrupted"]
        );
        let is_disrupted = |t: &Taint| t.key == "karpenter.sh/disrupted";
        let untainted =
            apply_locally(&again, &taint_ops(&again, is_disrupted, &[])).expect("applies");
        assert_eq!(keys(&untainted), ["node.kubernetes.io/not-ready"]);
        assert!(taint_ops(&untainted, is_disrupted, &[]).is_empty());
    }
}
