//! Gauges read off the leader's view of the cluster when Prometheus scrapes:
//! each managed node's allocatable and requested resources, each offering's
//! price and availability, and how long each NodeClaim condition has held.
//! Read at scrape time, a node or NodeClaim that goes away takes its series
//! with it; reported by the leader alone, sums across replicas do not count
//! a node twice. Names and labels are Karpenter's, so its dashboards work.

use crate::Ctx;
use crate::crds::NodeClaim;
use crate::metrics::Metrics;
use crate::slim::{Node, Pod};
use crate::snapshot::cluster::{is_daemon_set_pod, is_terminal};
use crate::snapshot::{add, pod_requests, resource_list};
use engine::ResourceList;
use kube::ResourceExt;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use vocabulary::labels;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node_name: String,
    pub nodepool: String,
    pub resource_type: String,
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
    pub arch: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct OfferingLabels {
    pub instance_type: String,
    pub capacity_type: String,
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub name: String,
    pub nodepool: String,
    pub r#type: String,
    pub status: String,
    pub reason: String,
}

/// What one managed node has and what its pods ask of it.
#[derive(Debug, PartialEq)]
pub struct NodeUse {
    pub allocatable: Vec<(NodeLabels, f64)>,
    pub pod_requests: Vec<(NodeLabels, f64)>,
    pub daemon_requests: Vec<(NodeLabels, f64)>,
}

/// Empty until this replica leads; then the leader's context.
#[derive(Default)]
pub struct FleetMetrics(OnceLock<Arc<Ctx>>);

impl std::fmt::Debug for FleetMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetMetrics")
    }
}

impl FleetMetrics {
    pub fn lead(&self, ctx: Arc<Ctx>) {
        let _ = self.0.set(ctx);
    }
}

impl Collector for FleetMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let Some(ctx) = self.0.get() else {
            return Ok(());
        };
        let nodes = ctx.cluster.nodes.state();
        let pods = ctx.cluster.pods.state();
        let used = node_use(nodes.iter().map(|n| &**n), pods.iter().map(|p| &**p));
        for (name, help, series) in [
            (
                "karpenter_nodes_allocatable",
                "Resources each managed node offers pods (cpu in cores, memory in bytes)",
                &used.allocatable,
            ),
            (
                "karpenter_nodes_total_pod_requests",
                "Resources requested by the pods bound to each managed node, DaemonSet pods included",
                &used.pod_requests,
            ),
            (
                "karpenter_nodes_total_daemon_requests",
                "Resources requested by the DaemonSet pods bound to each managed node",
                &used.daemon_requests,
            ),
        ] {
            gauges(&mut encoder, name, help, series)?;
        }

        let offerings = offerings(ctx);
        let price: Vec<_> = offerings.iter().map(|(l, p, _)| (l.clone(), *p)).collect();
        gauges(
            &mut encoder,
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Estimated $/hour of each offering the NodePools were offered",
            &price,
        )?;
        let available: Vec<_> = offerings
            .iter()
            .map(|(l, _, a)| (l.clone(), f64::from(u8::from(*a))))
            .collect();
        gauges(
            &mut encoder,
            "karpenter_cloudprovider_instance_type_offering_available",
            "1 if the offering can be launched now, 0 if not (or recently out of capacity)",
            &available,
        )?;

        let claims = ctx.cluster.node_claims.state();
        let now = jiff::Timestamp::now();
        gauges(
            &mut encoder,
            "operator_nodeclaim_status_condition_current_status_seconds",
            "Seconds each NodeClaim condition has held its status",
            &condition_ages(claims.iter().map(|c| &**c), now),
        )
    }
}

fn gauges<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(L, f64)],
) -> std::fmt::Result {
    let gauge = ConstGauge::new(0.0f64);
    let mut family = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    for (labels, value) in series {
        ConstGauge::new(*value).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

/// Allocatable and requested resources of every node a NodePool owns.
pub fn node_use<'a>(
    nodes: impl Iterator<Item = &'a Node>,
    pods: impl Iterator<Item = &'a Pod>,
) -> NodeUse {
    let mut requested: HashMap<&str, (ResourceList, ResourceList)> = HashMap::new();
    for pod in pods {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(node) = spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        // A pod whose requests do not parse was refused by the API server;
        // it cannot be here, and if it were it asks for nothing countable.
        let Ok(r) = pod_requests::requests(spec) else {
            continue;
        };
        let (all, daemons) = requested.entry(node).or_default();
        add(all, &r);
        if is_daemon_set_pod(pod) {
            add(daemons, &r);
        }
    }
    let mut out = NodeUse {
        allocatable: Vec::new(),
        pod_requests: Vec::new(),
        daemon_requests: Vec::new(),
    };
    let empty = (ResourceList::new(), ResourceList::new());
    for node in nodes {
        let Some(pool) = node.label(labels::NODE_POOL) else {
            continue;
        };
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| resource_list(s.resources.allocatable.as_ref()).ok())
            .unwrap_or_default();
        let name = node.name_any();
        let (all, daemons) = requested.get(name.as_str()).unwrap_or(&empty);
        let label = |resource: &str| NodeLabels {
            node_name: name.clone(),
            nodepool: pool.to_string(),
            resource_type: resource.to_string(),
            instance_type: node.label(labels::INSTANCE_TYPE).unwrap_or_default().into(),
            capacity_type: node.label(labels::CAPACITY_TYPE).unwrap_or_default().into(),
            zone: node.label(labels::ZONE).unwrap_or_default().into(),
            arch: node.label(labels::ARCH).unwrap_or_default().into(),
        };
        // Every resource the node offers, each requested one even at zero,
        // so a ratio of the two has a series for every node.
        for (resource, v) in allocatable.iter() {
            out.allocatable
                .push((label(resource), Metrics::in_metric_units(resource, *v)));
            let asked = all.get(resource).copied().unwrap_or(0);
            out.pod_requests
                .push((label(resource), Metrics::in_metric_units(resource, asked)));
            let daemon = daemons.get(resource).copied().unwrap_or(0);
            out.daemon_requests
                .push((label(resource), Metrics::in_metric_units(resource, daemon)));
        }
    }
    out
}

/// Each offering in the catalogs the NodePools were last given, with its
/// price and whether it can be launched now: offerings recently out of
/// capacity count as unavailable, as the provisioner sees them.
fn offerings(ctx: &Ctx) -> Vec<(OfferingLabels, f64, bool)> {
    let now = Instant::now();
    let mut by_offering: BTreeMap<OfferingLabels, (f64, bool)> = BTreeMap::new();
    for mut catalog in ctx.instance_types.catalogs() {
        ctx.unavailable.apply(&mut catalog, now);
        for t in catalog.iter() {
            for o in &t.offerings {
                let key = OfferingLabels {
                    instance_type: t.name.clone(),
                    capacity_type: o.capacity_type.clone(),
                    zone: o.zone.clone().unwrap_or_default(),
                };
                // Two NodePools may see one offering differently (an
                // overlay's price, a reservation): the cheapest, and
                // available if any sees it so.
                let e = by_offering.entry(key).or_insert((o.price, o.available));
                e.0 = e.0.min(o.price);
                e.1 |= o.available;
            }
        }
    }
    by_offering
        .into_iter()
        .map(|(k, (price, available))| (k, price, available))
        .collect()
}

/// Seconds since each NodeClaim condition last changed.
pub fn condition_ages<'a>(
    claims: impl Iterator<Item = &'a NodeClaim>,
    now: jiff::Timestamp,
) -> Vec<(ConditionLabels, f64)> {
    let mut out = Vec::new();
    for claim in claims {
        let Some(status) = claim.status.as_ref() else {
            continue;
        };
        for c in &status.conditions {
            let age = (now - c.last_transition_time.0)
                .total(jiff::Unit::Second)
                .unwrap_or(0.0)
                .max(0.0);
            out.push((
                ConditionLabels {
                    name: claim.name_any(),
                    nodepool: claim
                        .labels()
                        .get(labels::NODE_POOL)
                        .cloned()
                        .unwrap_or_default(),
                    r#type: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                },
                age.floor(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn managed(name: &str) -> Node {
        let mut v: serde_json::Value = fixtures::node(name)
            .label(labels::NODE_POOL, "web")
            .label(labels::INSTANCE_TYPE, "d4")
            .label(labels::CAPACITY_TYPE, "spot")
            .label(labels::ZONE, "z1")
            .label(labels::ARCH, "amd64")
            .build();
        v["status"] = json!({"allocatable": {"cpu": "3900m", "memory": "16Gi", "pods": "110"}});
        serde_json::from_value(v).expect("node")
    }

    fn pod(node: &str, cpu: &str, phase: &str, daemon: bool) -> Pod {
        let owners = if daemon {
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("p-{cpu}"), "namespace": "default", "ownerReferences": owners},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": phase},
        }))
        .expect("pod")
    }

    fn value(series: &[(NodeLabels, f64)], node: &str, resource: &str) -> Option<f64> {
        series
            .iter()
            .find(|(l, _)| l.node_name == node && l.resource_type == resource)
            .map(|(_, v)| *v)
    }

    #[test]
    fn each_managed_node_reports_what_it_offers_and_what_its_live_pods_ask() {
        let nodes = [
            managed("a"),
            managed("b"),
            fixtures::node("unmanaged").build(),
        ];
        let pods = [
            pod("a", "1500m", "Running", false),
            pod("a", "500m", "Running", true),
            pod("a", "8", "Succeeded", false),
            pod("unmanaged", "2", "Running", false),
        ];
        let used = node_use(nodes.iter(), pods.iter());
        assert_eq!(value(&used.allocatable, "a", "cpu"), Some(3.9), "cores");
        assert_eq!(
            value(&used.allocatable, "a", "memory"),
            Some(16.0 * 1024.0 * 1024.0 * 1024.0)
        );
        assert_eq!(
            value(&used.pod_requests, "a", "cpu"),
            Some(2.0),
            "the finished pod is not counted"
        );
        assert_eq!(value(&used.daemon_requests, "a", "cpu"), Some(0.5));
        assert_eq!(
            value(&used.pod_requests, "b", "cpu"),
            Some(0.0),
            "an empty node has a series"
        );
        assert!(value(&used.allocatable, "unmanaged", "cpu").is_none());
        let (l, _) = &used.allocatable[0];
        assert_eq!(
            (
                l.nodepool.as_str(),
                l.instance_type.as_str(),
                l.capacity_type.as_str(),
                l.zone.as_str(),
                l.arch.as_str()
            ),
            ("web", "d4", "spot", "z1", "amd64")
        );
    }

    #[test]
    fn each_condition_reports_how_long_it_has_held() {
        let mut claim: serde_json::Value = fixtures::claim("a").build();
        claim["status"]["conditions"] = json!([
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Registered", "status": "False", "reason": "NodeNotFound", "message": "", "lastTransitionTime": "2026-01-01T00:00:30Z"},
        ]);
        let claim: NodeClaim = serde_json::from_value(claim).expect("claim");
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().expect("time");
        let ages = condition_ages([&claim].into_iter(), now);
        let age = |t: &str| {
            ages.iter()
                .find(|(l, _)| l.r#type == t)
                .map(|(l, v)| (l.status.as_str(), l.nodepool.as_str(), *v))
        };
        assert_eq!(age("Launched"), Some(("True", "default", 600.0)));
        assert_eq!(age("Registered"), Some(("False", "default", 570.0)));
    }
}
