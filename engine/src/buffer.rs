//! CapacityBuffers: spare room for a number of pods of one template, kept
//! as the cluster fills. Cluster Autoscaler's and Karpenter's API
//! (`autoscaling.x-k8s.io/v1beta1`); the host reads the objects, this
//! decides how many pods a buffer holds and reads a plan back per buffer.
//!
//! A buffer's room is its virtual pods: pods that exist only in snapshots
//! ([`Pod::buffer`] names their buffer). The scheduler places them after
//! every real pod, so they land in the room real pods leave and otherwise
//! make NodeClaims; disruption treats the room they hold as load
//! ([`crate::disruption`]), so consolidation keeps it and emptiness does not
//! call a node that holds it empty.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::plan::{Plan, Target};
use crate::snapshot::{Pod, PodTemplate, ResourceList};

/// What sizes a buffer: `spec.replicas`, `spec.percentage` (of its
/// scalable object's replicas) and `spec.limits`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Size {
    pub replicas: Option<i32>,
    pub percentage: Option<i32>,
    /// In the engine's units ([`crate::parse_resource`]).
    pub limits: ResourceList,
}

/// The most virtual pods one buffer makes: a buffer sized by limits alone
/// over tiny requests would otherwise ask for millions.
pub const MAX_REPLICAS: i32 = 10_000;

/// How many pods a buffer holds, as Karpenter counts them: the
/// larger of `replicas` and `percentage` of the scalable object's replicas
/// (rounded up, at least one when both are positive), capped by as many
/// pods as fit in `limits`; with neither, as many as fit in `limits`; with
/// nothing, none. Only the resources both the limits and the pod name count.
pub fn replicas(size: &Size, requests: &ResourceList, scalable_replicas: Option<i32>) -> i32 {
    let mut wanted: Option<i32> = size.replicas.map(|r| r.max(0));
    if let (Some(pct), Some(of)) = (size.percentage, scalable_replicas)
        && of > 0
    {
        let n = (i64::from(of) * i64::from(pct.max(0)) + 99) / 100;
        let n = if pct > 0 { n.max(1) } else { n };
        let n = n.min(i64::from(i32::MAX)) as i32;
        wanted = Some(wanted.map_or(n, |w| w.max(n)));
    }
    let fit = size
        .limits
        .iter()
        .filter_map(|(name, limit)| {
            let request = requests.get(name.as_str()).copied().filter(|r| *r > 0)?;
            Some((limit.max(&0) / request).min(i64::from(i32::MAX)) as i32)
        })
        .min();
    match (wanted, fit) {
        (Some(w), Some(f)) => w.min(f),
        (Some(w), None) => w,
        (None, Some(f)) => f,
        (None, None) => 0,
    }
}

/// A buffer as its virtual pods carry it.
#[derive(Debug, Clone, Copy)]
pub struct Buffer<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    /// Orders its pods among the others, as a pod's creation does.
    pub creation: i64,
}

impl Buffer<'_> {
    /// "namespace/name", the value of [`Pod::buffer`].
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The buffer's `count` virtual pods, sharing `template`; names and uids are
/// stable across passes, so plans compare.
pub fn virtual_pods(buffer: Buffer, count: i32, template: Arc<PodTemplate>) -> Vec<Pod> {
    let key = buffer.key();
    (1..=count.max(0))
        .map(|i| Pod {
            namespace: buffer.namespace.to_string(),
            name: format!("capacity-buffer-{}-{i}", buffer.name),
            uid: format!("{}-{i}", buffer.uid),
            creation: buffer.creation,
            template: template.clone(),
            buffer: Some(key.clone()),
            nominated_node: None,
        })
        .collect()
}

/// Where a plan put one buffer's virtual pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// In room existing nodes and NodeClaims already have.
    pub existing: u32,
    /// On NodeClaims the plan creates.
    pub new: u32,
    /// Nowhere, and why the first of them could not go anywhere.
    pub failed: u32,
    pub reason: Option<String>,
}

/// Per buffer ("namespace/name") with virtual pods among `pods`: where
/// `plan` put them.
pub fn outcomes(plan: &Plan, pods: &[Pod]) -> BTreeMap<String, Outcome> {
    let mut of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out: BTreeMap<String, Outcome> = BTreeMap::new();
    for p in pods {
        if let Some(b) = &p.buffer {
            of.insert(&p.uid, b);
            out.entry(b.clone()).or_default();
        }
    }
    for placement in &plan.placements {
        if let Some(o) = of
            .get(placement.pod.uid.as_str())
            .and_then(|b| out.get_mut(*b))
        {
            match placement.target {
                Target::ExistingNode(_) => o.existing += 1,
                Target::NewNodeClaim(_) => o.new += 1,
            }
        }
    }
    for u in &plan.unschedulable {
        if let Some(o) = of.get(u.pod.uid.as_str()).and_then(|b| out.get_mut(*b)) {
            o.failed += 1;
            o.reason.get_or_insert_with(|| u.reason.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(replicas: Option<i32>, percentage: Option<i32>, limits: &[(&str, i64)]) -> Size {
        Size {
            replicas,
            percentage,
            limits: limits.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn cpu(millis: i64) -> ResourceList {
        [("cpu".to_string(), millis)].into_iter().collect()
    }

    #[test]
    fn replicas_and_percentage_take_the_larger_and_limits_cap_them() {
        assert_eq!(replicas(&size(Some(3), None, &[]), &cpu(1000), None), 3);
        assert_eq!(
            replicas(&size(None, Some(20), &[]), &cpu(1000), Some(10)),
            2
        );
        // Rounded up, at least one.
        assert_eq!(replicas(&size(None, Some(1), &[]), &cpu(1000), Some(10)), 1);
        assert_eq!(
            replicas(&size(None, Some(25), &[]), &cpu(1000), Some(10)),
            3
        );
        assert_eq!(
            replicas(&size(Some(1), Some(50), &[]), &cpu(1000), Some(10)),
            5
        );
        assert_eq!(
            replicas(&size(Some(8), None, &[("cpu", 4500)]), &cpu(1000), None),
            4
        );
        // Limits alone: as many as fit; a resource the pod does not ask for
        // does not limit.
        assert_eq!(
            replicas(&size(None, None, &[("cpu", 4500)]), &cpu(1000), None),
            4
        );
        assert_eq!(
            replicas(&size(Some(2), None, &[("memory", 1)]), &cpu(1000), None),
            2
        );
        assert_eq!(replicas(&size(None, None, &[]), &cpu(1000), None), 0);
        // A percentage of a workload scaled to zero is nothing.
        assert_eq!(replicas(&size(None, Some(50), &[]), &cpu(1000), Some(0)), 0);
    }

    #[test]
    fn virtual_pods_are_named_after_their_buffer() {
        let b = Buffer {
            namespace: "ns",
            name: "web",
            uid: "u",
            creation: 7,
        };
        let pods = virtual_pods(b, 2, Arc::default());
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[1].name, "capacity-buffer-web-2");
        assert_eq!(pods[1].uid, "u-2");
        assert_eq!(pods[0].buffer.as_deref(), Some("ns/web"));
    }
}
