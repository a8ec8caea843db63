//! PodDisruptionBudgets: whether evicting a node's pods is allowed now.

use crate::snapshot::{LabelSelector, Labels, SelectorOperator, Taint, TaintEffect};
use crate::taints::first_untolerated;

use super::snapshot::{NodePod, PodDisruptionBudget};

/// The taint a node gets when disruption picks it; pods that tolerate it are
/// left in place by the drain, so they are not evicted.
const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Whether a label selector picks `labels`. `None` picks nothing; an empty
/// selector picks everything.
pub(crate) fn selects(selector: Option<&LabelSelector>, labels: &Labels) -> bool {
    let Some(sel) = selector else {
        return false;
    };
    sel.match_labels
        .iter()
        .all(|(k, v)| labels.get(k.as_str()) == Some(v))
        && sel.match_expressions.iter().all(|e| {
            let value = labels.get(e.key.as_str());
            match e.operator {
                SelectorOperator::In => value.is_some_and(|v| e.values.contains(v)),
                SelectorOperator::NotIn => value.is_none_or(|v| !e.values.contains(v)),
                SelectorOperator::Exists => value.is_some(),
                SelectorOperator::DoesNotExist => value.is_none(),
            }
        })
}

/// Whether the drain would call the Eviction API for this pod (a buffer's
/// virtual pod does not exist to evict, one being deleted is already going).
fn evicted(p: &NodePod, disrupted: &Taint) -> bool {
    if p.pod.buffer.is_some() || p.terminating {
        return false;
    }
    let tolerates =
        first_untolerated(std::slice::from_ref(disrupted), &p.pod.tolerations, false).is_none();
    !p.mirror && !tolerates && p.do_not_disrupt.as_deref() != Some("true")
}

/// The first PDB that keeps one of `pods` from being evicted, as Karpenter
/// words it: a matching PDB with no disruption allowed, or several PDBs on
/// one pod (the Eviction API refuses those). `pdbs` sorted by namespace, name.
pub(crate) fn blocking(pdbs: &[&PodDisruptionBudget], pods: &[&NodePod]) -> Option<String> {
    if pdbs.is_empty() {
        return None;
    }
    let disrupted = Taint {
        key: DISRUPTED_TAINT.to_string(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    };
    for p in pods.iter().filter(|p| evicted(p, &disrupted)) {
        let matching: Vec<&PodDisruptionBudget> = pdbs
            .iter()
            .copied()
            .filter(|b| {
                b.namespace == p.pod.namespace && selects(b.selector.as_ref(), &p.pod.labels)
            })
            .collect();
        if matching.len() > 1 {
            let names: Vec<String> = matching
                .iter()
                .map(|b| format!("{}/{}", b.namespace, b.name))
                .collect();
            return Some(format!(
                "Eviction does not support multiple PDBs: {}",
                names.join(", ")
            ));
        }
        if let Some(b) = matching.first() {
            if b.always_allow_unhealthy && p.not_ready {
                continue;
            }
            if b.disruptions_allowed <= 0 {
                return Some(format!(
                    "PDB {}/{} prevents pod evictions",
                    b.namespace, b.name
                ));
            }
        }
    }
    None
}
