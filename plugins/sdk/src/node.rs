//! What a provider puts on the Node it boots, composed by one rule so every
//! provider's nodes carry the same labels and taints for the same NodeClaim.

use crate::bindings::karpenter::provider::types::{
    InstanceType, NodeClaim, Offering, Operator, Requirement, Taint, TaintEffect,
};
use vocabulary::{labels, taints};

/// The labels the launched machine itself determines: the instance type's
/// and the chosen offering's single-valued requirements, and the offering's
/// zone and capacity type. Providers add their own (region, image, ...)
/// after these and pass the lot to [`node_labels`].
pub fn resolved_labels(it: &InstanceType, offering: &Offering) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = single_valued(&it.requirements)
        .chain(single_valued(&offering.requirements))
        .filter(|(k, _)| *k != labels::ZONE && *k != labels::CAPACITY_TYPE)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.push((labels::ZONE.into(), offering.zone.clone()));
    out.push((labels::CAPACITY_TYPE.into(), offering.capacity_type.clone()));
    out
}

/// The Node's labels, with Karpenter's precedence (later wins): what the
/// provider resolved, then the NodeClaim's single-valued requirements, then
/// the NodeClaim's own labels (its NodePool template's); the NodePool label
/// is always the NodeClaim's pool. One value per key, keys in the order
/// first set.
pub fn node_labels(
    claim: &NodeClaim,
    provider: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    // A Vec, not a map: a map's code costs plugins kilobytes, and a node
    // has a few dozen labels.
    let mut out: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| match out.iter_mut().find(|(n, _)| n == k) {
        Some(e) => v.clone_into(&mut e.1),
        None => out.push((k.to_string(), v.to_string())),
    };
    for (k, v) in provider {
        set(&k, &v);
    }
    for (k, v) in single_valued(&claim.requirements) {
        set(k, v);
    }
    for (k, v) in &claim.labels {
        set(k, v);
    }
    if !claim.node_pool.is_empty() {
        set(labels::NODE_POOL, &claim.node_pool);
    }
    out
}

fn single_valued(reqs: &[Requirement]) -> impl Iterator<Item = (&str, &str)> {
    reqs.iter()
        .filter(|r| matches!(r.operator, Operator::In) && r.values.len() == 1)
        .map(|r| (r.key.as_str(), r.values[0].as_str()))
}

/// The Node's taints at boot: the NodeClaim's taints, its startup taints,
/// and the unregistered taint the controller lifts at registration. The
/// first of a key and effect wins.
pub fn node_taints(claim: &NodeClaim) -> Vec<Taint> {
    let unregistered = Taint {
        key: taints::UNREGISTERED.into(),
        value: String::new(),
        effect: TaintEffect::NoExecute,
    };
    let mut out: Vec<Taint> = Vec::new();
    for t in claim
        .taints
        .iter()
        .chain(&claim.startup_taints)
        .chain(std::iter::once(&unregistered))
    {
        if !out
            .iter()
            .any(|o| o.key == t.key && effect_name(o.effect) == effect_name(t.effect))
        {
            out.push(t.clone());
        }
    }
    out
}

/// The effect as Kubernetes spells it.
pub fn effect_name(effect: TaintEffect) -> &'static str {
    match effect {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// `key=value:Effect`, as the kubelet's `--register-with-taints` takes it.
pub fn kubelet_taint(t: &Taint) -> String {
    format!("{}={}:{}", t.key, t.value, effect_name(t.effect))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: Operator::In,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    fn taint(key: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: "v".into(),
            effect,
        }
    }

    pub(crate) fn claim() -> NodeClaim {
        NodeClaim {
            name: "default-abc".into(),
            node_pool: "default".into(),
            labels: vec![
                ("team".into(), "web".into()),
                ("example.com/tier".into(), "claim".into()),
            ],
            annotations: vec![],
            taints: vec![taint("dedicated", TaintEffect::NoSchedule)],
            startup_taints: vec![
                taint("dedicated", TaintEffect::NoSchedule),
                taint("cni-not-ready", TaintEffect::NoExecute),
            ],
            requirements: vec![
                req(labels::ZONE, &["zone-a"]),
                req(labels::INSTANCE_TYPE, &["a", "b"]),
                req("example.com/tier", &["requirement"]),
                req("example.com/disk", &["ssd"]),
            ],
            resource_requests: vec![],
            node_class_ref: crate::bindings::karpenter::provider::types::NodeClassRef {
                group: "g".into(),
                kind: "K".into(),
                name: "n".into(),
            },
            provider_id: None,
            image_id: None,
            kubelet_version: None,
        }
    }

    #[test]
    fn the_claims_labels_win_over_its_requirements_which_win_over_the_provider() {
        let provider = vec![
            (labels::INSTANCE_TYPE.to_string(), "a".to_string()),
            (labels::ZONE.to_string(), "zone-a".to_string()),
            ("example.com/disk".to_string(), "hdd".to_string()),
            ("example.com/tier".to_string(), "provider".to_string()),
            (labels::NODE_POOL.to_string(), "spoofed".to_string()),
        ];
        let got: std::collections::BTreeMap<String, String> =
            node_labels(&claim(), provider).into_iter().collect();
        let get = |k: &str| got.get(k).map(String::as_str);
        assert_eq!(get(labels::INSTANCE_TYPE), Some("a"));
        assert_eq!(get("example.com/disk"), Some("ssd"));
        assert_eq!(get("example.com/tier"), Some("claim"));
        assert_eq!(get("team"), Some("web"));
        assert_eq!(get(labels::NODE_POOL), Some("default"));
    }

    #[test]
    fn taints_keep_the_first_of_a_key_and_effect_and_end_unregistered() {
        let got: Vec<String> = node_taints(&claim()).iter().map(kubelet_taint).collect();
        assert_eq!(
            got,
            [
                "dedicated=v:NoSchedule",
                "cni-not-ready=v:NoExecute",
                "karpenter.sh/unregistered=:NoExecute"
            ]
        );
    }
}
