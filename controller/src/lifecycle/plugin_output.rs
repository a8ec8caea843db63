//! What a plugin's launched instance may claim. The plugin is untrusted: the
//! providerID it returns must not be one the cluster already knows as some
//! other NodeClaim's or as a Node Karpenter does not manage (or the host
//! would adopt, and later delete, someone else's machine), and its labels
//! may add to the NodeClaim's but never replace them, nor take over the
//! domains the host and the kubelet own.

use crate::crds::NodeClaim;
use crate::slim::Node;
use std::collections::BTreeMap;
use vocabulary::labels;

/// Whether another NodeClaim than `claim` already has this providerID.
pub fn owned_by_another(other: &NodeClaim, provider_id: &str, claim: &str) -> bool {
    other.provider_id() == Some(provider_id) && other.metadata.name.as_deref() != Some(claim)
}

/// Whether this providerID is a Node's that Karpenter does not manage.
pub fn unmanaged_node(node: &Node, provider_id: &str) -> bool {
    node.provider_id() == Some(provider_id) && !launched_by_karpenter(node)
}

/// A Node registered for a NodeClaim carries its NodePool's label, or at
/// least the taint every such Node registers with.
fn launched_by_karpenter(n: &Node) -> bool {
    n.label(labels::NODE_POOL).is_some()
        || n.taints()
            .iter()
            .any(|t| t.key == vocabulary::taints::UNREGISTERED)
}

/// Whether a plugin may set this label on a NodeClaim and its Node: not in
/// the karpenter.sh domain (the host sets the capacity type itself), and in
/// the kubernetes.io and k8s.io domains only the well-known labels and those
/// under `node.kubernetes.io/`, which the kubelet itself may set.
pub fn plugin_may_set(key: &str) -> bool {
    const WELL_KNOWN: [&str; 9] = [
        labels::ARCH,
        labels::OS,
        labels::ZONE,
        labels::REGION,
        labels::INSTANCE_TYPE,
        labels::WINDOWS_BUILD,
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
    ];
    if WELL_KNOWN.contains(&key) {
        return true;
    }
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    let within = |d: &str| domain == d || domain.ends_with(&format!(".{d}"));
    if within("karpenter.sh") || within("k8s.io") {
        return false;
    }
    if within("kubernetes.io") {
        return domain == "node.kubernetes.io";
    }
    true
}

/// The labels to add to a NodeClaim from its launched instance: the host's
/// own from the instance's fields, then the plugin's that it may set and
/// that the NodeClaim does not already have. Also the plugin's labels that
/// were refused; one the NodeClaim already has, with the same value (a
/// plugin reporting its Node's labels back), is neither.
pub fn labels_to_add(
    current: &BTreeMap<String, String>,
    plugin_labels: &[(String, String)],
    from_fields: &[(&str, &str)],
) -> (BTreeMap<String, String>, Vec<String>) {
    let mut add = BTreeMap::new();
    let mut refused = Vec::new();
    for (k, v) in plugin_labels {
        if from_fields.iter().any(|(f, _)| f == k) || current.get(k) == Some(v) {
            // The host sets these from the instance's fields, or it is
            // already there.
        } else if !plugin_may_set(k) || current.contains_key(k) {
            refused.push(k.clone());
        } else {
            add.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in from_fields {
        if current.get(*k).map(String::as_str) != Some(*v) {
            add.insert(k.to_string(), v.to_string());
        }
    }
    (add, refused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn claim(name: &str, provider_id: Option<&str>) -> Arc<NodeClaim> {
        let mut c = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        });
        if let Some(id) = provider_id {
            c["status"] = json!({"providerID": id});
        }
        Arc::new(serde_json::from_value(c).expect("claim"))
    }

    fn node(name: &str, provider_id: &str, pool: Option<&str>) -> Arc<Node> {
        let mut n =
            json!({"metadata": {"name": name, "labels": {}}, "spec": {"providerID": provider_id}});
        if let Some(p) = pool {
            n["metadata"]["labels"]["karpenter.sh/nodepool"] = json!(p);
        }
        Arc::new(serde_json::from_value(n).expect("node"))
    }

    #[test]
    fn a_provider_id_the_cluster_knows_as_someone_elses_is_refused() {
        let a = claim("a", Some("cloud://1"));
        assert!(owned_by_another(&a, "cloud://1", "b"), "a's");
        // Its own providerID again (a relaunch after a crash), or a new one.
        assert!(!owned_by_another(&a, "cloud://1", "a"));
        assert!(!owned_by_another(&a, "cloud://2", "b"));
        assert!(!owned_by_another(&claim("b", None), "cloud://1", "b"));

        assert!(unmanaged_node(
            &node("system", "cloud://9", None),
            "cloud://9"
        ));
        assert!(!unmanaged_node(
            &node("ours", "cloud://1", Some("default")),
            "cloud://1"
        ));
        assert!(!unmanaged_node(
            &node("system", "cloud://9", None),
            "cloud://8"
        ));
        // Its Node registered before the launch was recorded.
        let mut registering = node("registering", "cloud://3", None);
        Arc::make_mut(&mut registering).spec = serde_json::from_value(json!({
            "providerID": "cloud://3",
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        }))
        .expect("spec");
        assert!(!unmanaged_node(&registering, "cloud://3"));
    }

    #[test]
    fn plugin_labels_add_but_never_replace_or_take_over_reserved_domains() {
        let current = BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
        ]);
        let plugin = [
            ("team", "b"),
            ("karpenter.sh/nodepool", "other"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/initialized", "true"),
            ("kubernetes.io/hostname", "x"),
            ("node-restriction.kubernetes.io/trusted", "yes"),
            ("sub.k8s.io/x", "y"),
            ("kubernetes.io/arch", "amd64"),
            (
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "true",
            ),
            ("cloud.example.com/sku", "d4"),
            ("node.kubernetes.io/instance-type", "d8"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let (add, refused) = labels_to_add(
            &current,
            &plugin,
            &[("node.kubernetes.io/instance-type", "d4")],
        );
        assert_eq!(
            add.keys().map(String::as_str).collect::<Vec<_>>(),
            vec![
                "cloud.example.com/sku",
                "kubernetes.io/arch",
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "node.kubernetes.io/instance-type",
            ]
        );
        assert_eq!(
            refused,
            vec![
                "team",
                "karpenter.sh/nodepool",
                "karpenter.sh/initialized",
                "kubernetes.io/hostname",
                "node-restriction.kubernetes.io/trusted",
                "sub.k8s.io/x",
            ]
        );
    }
}
