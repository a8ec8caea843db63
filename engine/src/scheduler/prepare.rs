//! Turns a [`Snapshot`] into [`Prepared`]: canonically sorted, interned and
//! compiled, ready to be scheduled any number of times.
//!
//! Architecture Invariant: everything here is sorted before it is interned, so
//! ids (and every tie broken by them) do not depend on input order.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::bitset::Bits;
use crate::intern::{FxHashMap, Interner};
use crate::plan::PodRef;
use crate::requirements::{Reqs, ValueSet};
use crate::resources::{POD_SLOT, ResourceNames, sub};
use crate::selector::{Selector, intern_labels, label_value};
use crate::snapshot::{
    BoundPod, DaemonSet, HostPort, InstanceType, Labels, Node, NodeAffinity, NodeInclusionPolicy,
    NodePool, NodeSelectorTerm, Offering, Operator, Options, Pod, PodAffinity, PodAffinityTerm,
    ResourceList, Snapshot, Taint, Toleration, WhenUnsatisfiable,
};
use vocabulary::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, WELL_KNOWN, ZONE};
use vocabulary::resources::PODS;
use vocabulary::taints::UNREGISTERED as UNREGISTERED_TAINT;

use super::reservations::Reservations;
use super::state::Start;

/// Allocatable for a resource an instance type or node does not list: `pods`
/// is then unlimited, everything else zero.
const UNLIMITED: i64 = i64::MAX / 4;

/// A snapshot compiled for scheduling. Build once with [`Prepared::new`],
/// then call [`crate::schedule_prepared`] as often as needed.
#[derive(Debug, Clone)]
pub struct Prepared<'s> {
    pub(crate) strings: Interner,
    pub(crate) resources: ResourceNames,
    pub(crate) options: Options,
    /// Weight descending, then name.
    pub(crate) pools: Vec<PoolC>,
    /// Initialized first, then by name.
    pub(crate) nodes: Vec<NodeC>,
    /// Karpenter's order: CPU desc, memory desc, creation, uid.
    pub(crate) pods: Vec<PodC<'s>>,
    pub(crate) shapes: Vec<ShapeC>,
    pub(crate) groups: Vec<GroupC>,
    pub(crate) label_sets: Vec<LabelSetC>,
    /// Domains of each non-hostname topology key, sorted by name.
    pub(crate) universes: FxHashMap<u32, Vec<u32>>,
    pub(crate) domain_index: FxHashMap<(u32, u32), u32>,
    pub(crate) keys: KeyIds,
    /// What every scheduling run starts from.
    pub(crate) start: Start,
    pub(crate) reservations: Reservations,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyIds {
    pub(crate) hostname: u32,
    pub(crate) zone: u32,
    pub(crate) capacity_type: u32,
    pub(crate) instance_type: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct PoolC {
    pub(crate) name: String,
    pub(crate) taints: Vec<Taint>,
    pub(crate) startup_taints: Vec<Taint>,
    /// Pool requirements, template labels and `karpenter.sh/nodepool`.
    pub(crate) reqs: Reqs,
    /// Keys a pod may require even though `reqs` does not mention them.
    pub(crate) defined: Vec<u32>,
    /// Cheapest available offering first, then name.
    pub(crate) types: Vec<TypeC>,
    /// `types.len() * resources` allocatable amounts.
    pub(crate) alloc: Vec<i64>,
    pub(crate) capacity: Vec<i64>,
    /// Per resource: ascending thresholds and, for each, the types with at
    /// least that much allocatable.
    pub(crate) fit: Vec<(Vec<i64>, Vec<Bits>)>,
    /// Types compatible with `reqs` that have an available compatible offering.
    pub(crate) base_mask: Bits,
    pub(crate) daemon_overhead: Vec<i64>,
    pub(crate) limits: Vec<Option<i64>>,
    pub(crate) node_limit: Option<i64>,
    /// Keys that offerings constrain (zone, capacity type, ...), sorted.
    pub(crate) offering_keys: Vec<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct TypeC {
    pub(crate) name: String,
    pub(crate) reqs: Reqs,
    /// Cheapest first.
    pub(crate) offerings: Vec<OfferingC>,
    /// The NodeOverlays that priced its offerings and that added to its
    /// capacity, each once.
    pub(crate) price_overlays: Vec<String>,
    pub(crate) capacity_overlays: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct OfferingC {
    pub(crate) reqs: Reqs,
    pub(crate) zone: Option<String>,
    pub(crate) capacity_type: String,
    pub(crate) price: f64,
    pub(crate) available: bool,
    /// The reservation a reserved offering draws on.
    pub(crate) reservation: Option<u32>,
    pub(crate) price_overlay: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct NodeC {
    pub(crate) name: String,
    /// Index into [`Parts::nodes`].
    pub(crate) source: u32,
    pub(crate) initialized: bool,
    pub(crate) in_flight: bool,
    /// Index into [`Prepared::pools`] of a managed node.
    pub(crate) pool: Option<usize>,
    /// Counts against the pool's limits.
    pub(crate) capacity: Vec<i64>,
    pub(crate) labels: Vec<(u32, u32)>,
    /// Taints that block scheduling (startup and unregistered taints removed).
    pub(crate) taints: Vec<Taint>,
    pub(crate) allocatable: Vec<i64>,
    pub(crate) used: Vec<i64>,
    pub(crate) ports: Vec<PortC>,
    pub(crate) bound: Vec<BoundC>,
}

impl NodeC {
    /// Up and initialized: neither a NodeClaim without its Node nor a Node
    /// still starting.
    pub(crate) fn settled(&self) -> bool {
        self.initialized && !self.in_flight
    }
}

#[derive(Debug, Clone)]
pub(crate) struct BoundC {
    pub(crate) label_set: u32,
    /// Required anti-affinity groups this pod owns.
    pub(crate) anti: Vec<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct PodC<'s> {
    pub(crate) shape: u32,
    pub(crate) pod: &'s Pod,
    /// Index into [`Parts::pods`].
    pub(crate) source: u32,
    /// Index into [`Prepared::nodes`] of the pod's nominated node.
    pub(crate) nominated: Option<u32>,
}

impl PodC<'_> {
    pub(crate) fn pod_ref(&self) -> PodRef {
        PodRef {
            namespace: self.pod.namespace.clone(),
            name: self.pod.name.clone(),
            uid: self.pod.uid.clone(),
        }
    }
}

/// Everything about a pod that scheduling looks at; identical pods share one.
#[derive(Debug, Clone)]
pub(crate) struct ShapeC {
    pub(crate) label_set: u32,
    pub(crate) requests: Vec<i64>,
    pub(crate) selector_reqs: Reqs,
    /// ORed required node affinity terms.
    pub(crate) required_terms: Vec<Reqs>,
    /// Preferred node affinity terms, heaviest first.
    pub(crate) preferred_terms: Vec<Reqs>,
    pub(crate) tolerations: Vec<Toleration>,
    pub(crate) ports: Vec<PortC>,
    pub(crate) spread_required: Vec<u32>,
    pub(crate) spread_anyway: Vec<u32>,
    pub(crate) affinity_required: Vec<u32>,
    /// Heaviest first.
    pub(crate) affinity_preferred: Vec<u32>,
    pub(crate) anti_required: Vec<u32>,
    /// Heaviest first.
    pub(crate) anti_preferred: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum GroupKind {
    Spread,
    Affinity,
    AntiAffinity,
}

/// Pods that count together for one topology rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupC {
    pub(crate) kind: GroupKind,
    pub(crate) key: u32,
    pub(crate) namespaces: Vec<u32>,
    pub(crate) selector: Selector,
    pub(crate) max_skew: i32,
    pub(crate) min_domains: i32,
    pub(crate) honor_affinity: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct LabelSetC {
    pub(crate) namespace: u32,
    pub(crate) labels: Vec<(u32, u32)>,
    /// Groups whose selector picks pods with these labels.
    pub(crate) counted_in: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PortC {
    port: u16,
    protocol: String,
    ip: String,
}

impl PortC {
    fn new(p: &HostPort) -> Self {
        let protocol = if p.protocol.is_empty() {
            "TCP"
        } else {
            &p.protocol
        };
        let ip = if p.host_ip.is_empty() {
            "0.0.0.0"
        } else {
            &p.host_ip
        };
        PortC {
            port: p.port,
            protocol: protocol.to_string(),
            ip: ip.to_string(),
        }
    }

    pub(crate) fn conflicts(&self, other: &PortC) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

fn cheapest_available(it: &InstanceType, reservations: &Reservations) -> f64 {
    it.offerings
        .iter()
        .filter(|o| reservations.usable(it, o))
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min)
}

fn pod_cpu_mem(p: &Pod) -> (i64, i64) {
    let get = |k: &str| p.requests.get(k).copied().unwrap_or(0);
    (get("cpu"), get("memory"))
}

/// Karpenter's order among pods of equal CPU and memory: creation, uid (then
/// namespace and name for a total order).
fn pod_tie_order(a: &Pod, b: &Pod) -> Ordering {
    a.creation
        .cmp(&b.creation)
        .then_with(|| a.uid.cmp(&b.uid))
        .then_with(|| a.namespace.cmp(&b.namespace))
        .then_with(|| a.name.cmp(&b.name))
}

/// The fields of a pod that scheduling reads; equal keys share a [`ShapeC`].
#[derive(PartialEq, Eq, Hash)]
struct ShapeKey<'a> {
    namespace: &'a str,
    labels: &'a crate::snapshot::Labels,
    requests: &'a crate::snapshot::ResourceList,
    node_selector: &'a crate::snapshot::Labels,
    affinity: &'a crate::snapshot::Affinity,
    tolerations: &'a [Toleration],
    host_ports: &'a [HostPort],
    spread: &'a [crate::snapshot::TopologySpreadConstraint],
}

impl<'a> ShapeKey<'a> {
    fn of(p: &'a Pod) -> Self {
        ShapeKey {
            namespace: &p.namespace,
            labels: &p.labels,
            requests: &p.requests,
            node_selector: &p.node_selector,
            affinity: &p.affinity,
            tolerations: &p.tolerations,
            host_ports: &p.host_ports,
            spread: &p.topology_spread_constraints,
        }
    }
}

struct Builder {
    strings: Interner,
    groups: Vec<GroupC>,
    group_ids: FxHashMap<GroupC, u32>,
    label_sets: Vec<LabelSetC>,
    label_set_ids: FxHashMap<(u32, Vec<(u32, u32)>), u32>,
}

impl Builder {
    fn group(&mut self, g: GroupC) -> u32 {
        if let Some(&id) = self.group_ids.get(&g) {
            return id;
        }
        let id = self.groups.len() as u32;
        self.groups.push(g.clone());
        self.group_ids.insert(g, id);
        id
    }

    fn label_set(&mut self, namespace: &str, labels: &crate::snapshot::Labels) -> u32 {
        let ns = self.strings.intern(namespace);
        let labels = intern_labels(labels, &mut self.strings);
        let next = self.label_sets.len() as u32;
        let id = *self
            .label_set_ids
            .entry((ns, labels.clone()))
            .or_insert(next);
        if id == next {
            self.label_sets.push(LabelSetC {
                namespace: ns,
                labels,
                counted_in: Vec::new(),
            });
        }
        id
    }

    fn affinity_group(&mut self, kind: GroupKind, term: &PodAffinityTerm, namespace: &str) -> u32 {
        let mut namespaces: Vec<u32> = if term.namespaces.is_empty() {
            vec![self.strings.intern(namespace)]
        } else {
            term.namespaces
                .iter()
                .map(|n| self.strings.intern(n))
                .collect()
        };
        namespaces.sort_unstable();
        namespaces.dedup();
        let g = GroupC {
            kind,
            key: self.strings.intern(&term.topology_key),
            namespaces,
            selector: Selector::compile(term.label_selector.as_ref(), &[], &mut self.strings),
            max_skew: 0,
            min_domains: 0,
            honor_affinity: true,
        };
        self.group(g)
    }

    /// Required and preferred (heaviest first) groups of a pod affinity.
    fn affinity_groups(
        &mut self,
        kind: GroupKind,
        a: Option<&PodAffinity>,
        namespace: &str,
    ) -> (Vec<u32>, Vec<u32>) {
        let Some(a) = a else {
            return (Vec::new(), Vec::new());
        };
        let required = a
            .required
            .iter()
            .map(|t| self.affinity_group(kind, t, namespace))
            .collect();
        let mut preferred: Vec<_> = a.preferred.iter().enumerate().collect();
        preferred.sort_by_key(|(i, w)| (std::cmp::Reverse(w.weight), *i));
        let preferred = preferred
            .into_iter()
            .map(|(_, w)| self.affinity_group(kind, &w.term, namespace))
            .collect();
        (required, preferred)
    }

    fn term_reqs(&mut self, t: &NodeSelectorTerm) -> Reqs {
        Reqs::from_api(&t.match_expressions, &mut self.strings)
    }

    fn shape(&mut self, p: &Pod, resources: &ResourceNames) -> ShapeC {
        let label_set = self.label_set(&p.namespace, &p.labels);
        let mut requests = resources.vector(&p.requests);
        if !p.requests.contains_key(PODS) {
            requests[POD_SLOT] += 1;
        }
        let selector_reqs = self.selector_reqs(&p.node_selector);
        let na = p.affinity.node_affinity.as_ref();
        let required_terms = na
            .map(|a| a.required.iter().map(|t| self.term_reqs(t)).collect())
            .unwrap_or_default();
        let preferred_terms = na
            .map(|a| {
                let mut pref: Vec<_> = a.preferred.iter().enumerate().collect();
                pref.sort_by_key(|(i, t)| (std::cmp::Reverse(t.weight), *i));
                pref.into_iter()
                    .map(|(_, t)| self.term_reqs(&t.preference))
                    .collect()
            })
            .unwrap_or_default();
        let pod_labels = intern_labels(&p.labels, &mut self.strings);
        let mut spread_required = Vec::new();
        let mut spread_anyway = Vec::new();
        for c in &p.topology_spread_constraints {
            let extra: Vec<(u32, u32)> = c
                .match_label_keys
                .iter()
                .filter_map(|k| {
                    let k = self.strings.intern(k);
                    label_value(&pod_labels, k).map(|v| (k, v))
                })
                .collect();
            let g = GroupC {
                kind: GroupKind::Spread,
                key: self.strings.intern(&c.topology_key),
                namespaces: vec![self.strings.intern(&p.namespace)],
                selector: Selector::compile(c.label_selector.as_ref(), &extra, &mut self.strings),
                max_skew: c.max_skew.max(1),
                min_domains: c.min_domains.unwrap_or(0),
                honor_affinity: c.node_affinity_policy == NodeInclusionPolicy::Honor,
            };
            let id = self.group(g);
            match c.when_unsatisfiable {
                WhenUnsatisfiable::DoNotSchedule => spread_required.push(id),
                WhenUnsatisfiable::ScheduleAnyway => spread_anyway.push(id),
            }
        }
        let (affinity_required, affinity_preferred) = self.affinity_groups(
            GroupKind::Affinity,
            p.affinity.pod_affinity.as_ref(),
            &p.namespace,
        );
        let (anti_required, anti_preferred) = self.affinity_groups(
            GroupKind::AntiAffinity,
            p.affinity.pod_anti_affinity.as_ref(),
            &p.namespace,
        );
        ShapeC {
            label_set,
            requests,
            selector_reqs,
            required_terms,
            preferred_terms,
            tolerations: p.tolerations.clone(),
            ports: p.host_ports.iter().map(PortC::new).collect(),
            spread_required,
            spread_anyway,
            affinity_required,
            affinity_preferred,
            anti_required,
            anti_preferred,
        }
    }

    fn selector_reqs(&mut self, sel: &crate::snapshot::Labels) -> Reqs {
        let mut r = Reqs::default();
        for (k, v) in sel {
            let k = self.strings.intern(k);
            let v = self.strings.intern(v);
            r.add(k, &ValueSet::single(v), &self.strings);
        }
        r
    }

    /// Requirements a daemonset pod insists on (selector and first required term).
    fn daemon_reqs(&mut self, ds: &DaemonSet) -> Reqs {
        let mut r = self.selector_reqs(&ds.node_selector);
        if let Some(term) = ds
            .node_affinity
            .as_ref()
            .and_then(|a: &NodeAffinity| a.required.first())
        {
            let t = self.term_reqs(term);
            r.add_all(&t, &self.strings);
        }
        r
    }
}

/// What [`Prepared`] is built from: a [`Snapshot`]'s collections, borrowed, so
/// that disruption can assemble one from its own types without copying.
pub(crate) struct Parts<'a, 's> {
    pub(crate) node_pools: Vec<&'a NodePool>,
    pub(crate) nodes: Vec<NodeRef<'a>>,
    pub(crate) daemon_sets: Vec<&'a DaemonSet>,
    /// Pods to place; only these are kept by reference.
    pub(crate) pods: Vec<&'s Pod>,
    pub(crate) options: Options,
}

/// An existing node as preparation reads it.
pub(crate) struct NodeRef<'a> {
    pub(crate) name: &'a str,
    pub(crate) node_pool: Option<&'a str>,
    pub(crate) labels: &'a Labels,
    pub(crate) taints: &'a [Taint],
    pub(crate) allocatable: &'a ResourceList,
    /// Counts against NodePool limits; `allocatable` when absent.
    pub(crate) capacity: Option<&'a ResourceList>,
    pub(crate) initialized: bool,
    pub(crate) in_flight: bool,
    pub(crate) awaiting_launch: bool,
    pub(crate) pods: Vec<BoundRef<'a>>,
}

impl<'a> NodeRef<'a> {
    pub(crate) fn of(n: &'a Node) -> Self {
        NodeRef {
            name: &n.name,
            node_pool: n.node_pool.as_deref(),
            labels: &n.labels,
            taints: &n.taints,
            allocatable: &n.allocatable,
            capacity: n.capacity.as_ref(),
            initialized: n.initialized,
            in_flight: n.in_flight,
            awaiting_launch: n.awaiting_launch,
            pods: n.pods.iter().map(BoundRef::of).collect(),
        }
    }
}

/// A pod bound to a node, as its neighbours see it.
#[derive(Clone, Copy)]
pub(crate) struct BoundRef<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) labels: &'a Labels,
    pub(crate) requests: &'a ResourceList,
    pub(crate) host_ports: &'a [HostPort],
    pub(crate) anti_affinity: Option<&'a PodAffinity>,
}

impl<'a> BoundRef<'a> {
    pub(crate) fn of(b: &'a BoundPod) -> Self {
        BoundRef {
            namespace: &b.namespace,
            labels: &b.labels,
            requests: &b.requests,
            host_ports: &b.host_ports,
            anti_affinity: b.affinity.pod_anti_affinity.as_ref(),
        }
    }

    pub(crate) fn of_pod(p: &'a Pod) -> Self {
        BoundRef {
            namespace: &p.namespace,
            labels: &p.labels,
            requests: &p.requests,
            host_ports: &p.host_ports,
            anti_affinity: p.affinity.pod_anti_affinity.as_ref(),
        }
    }
}

impl<'s> Prepared<'s> {
    pub fn new(snapshot: &'s Snapshot) -> Prepared<'s> {
        Prepared::from_parts(Parts {
            node_pools: snapshot.node_pools.iter().collect(),
            nodes: snapshot.nodes.iter().map(NodeRef::of).collect(),
            daemon_sets: snapshot.daemon_sets.iter().collect(),
            pods: snapshot.pods.iter().collect(),
            options: snapshot.options,
        })
    }

    pub(crate) fn from_parts(parts: Parts<'_, 's>) -> Prepared<'s> {
        let mut b = Builder {
            strings: Interner::default(),
            groups: Vec::new(),
            group_ids: FxHashMap::default(),
            label_sets: Vec::new(),
            label_set_ids: FxHashMap::default(),
        };
        let mut well_known: Vec<u32> = WELL_KNOWN.iter().map(|k| b.strings.intern(k)).collect();
        well_known.sort_unstable();
        let keys = KeyIds {
            hostname: b.strings.intern(HOSTNAME),
            zone: b.strings.intern(ZONE),
            capacity_type: b.strings.intern(CAPACITY_TYPE),
            instance_type: b.strings.intern(INSTANCE_TYPE),
        };

        let resources = ResourceNames::new(
            parts
                .node_pools
                .iter()
                .flat_map(|p| {
                    std::iter::once(&p.limits).chain(p.instance_types.iter().map(|t| &t.capacity))
                })
                .chain(parts.nodes.iter().map(|n| n.allocatable))
                .chain(parts.pods.iter().map(|p| &p.requests))
                .chain(parts.daemon_sets.iter().map(|d| &d.requests)),
        );

        let mut pools_in = parts.node_pools;
        // A static NodePool launches for its replicas, never for pods.
        pools_in.retain(|p| p.replicas.is_none());
        pools_in.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
        let mut nodes_in: Vec<(u32, &NodeRef)> = parts
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u32, n))
            .collect();
        nodes_in.sort_by(|(_, a), (_, b)| {
            b.initialized
                .cmp(&a.initialized)
                .then_with(|| a.name.cmp(b.name))
        });
        let mut ds_in = parts.daemon_sets;
        ds_in.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        // Karpenter's order: CPU desc, memory desc (precomputed, so that
        // ties do not read the requests again), then creation and uid. A
        // CapacityBuffer's virtual pods come after every real pod, so real
        // pods take the room there is and the headroom is what is left.
        let mut keyed: Vec<((bool, i64, i64), u32, &'s Pod)> = parts
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (cpu, mem) = pod_cpu_mem(p);
                ((p.buffer.is_some(), cpu, mem), i as u32, *p)
            })
            .collect();
        keyed.sort_by(|(ka, _, a), (kb, _, b)| {
            ka.0.cmp(&kb.0)
                .then(kb.1.cmp(&ka.1))
                .then(kb.2.cmp(&ka.2))
                .then_with(|| pod_tie_order(a, b))
        });

        let ds_reqs: Vec<(Reqs, &DaemonSet)> =
            ds_in.iter().map(|d| (b.daemon_reqs(d), *d)).collect();
        let reservations =
            Reservations::new(&pools_in, &parts.nodes, parts.options.reserved_capacity);
        let pools: Vec<PoolC> = pools_in
            .iter()
            .map(|p| build_pool(p, &mut b, &resources, &ds_reqs, &well_known, &reservations))
            .collect();

        let nodes: Vec<NodeC> = nodes_in
            .iter()
            .map(|&(source, n)| {
                let pool_index = n
                    .node_pool
                    .and_then(|name| pools.iter().position(|p| p.name == name));
                let pool = pool_index.map(|i| &pools[i]);
                let taints = n
                    .taints
                    .iter()
                    .filter(|t| t.key != UNREGISTERED_TAINT)
                    .filter(|t| n.initialized || n.node_pool.is_none() || !t.is_ephemeral())
                    .filter(|t| {
                        n.initialized
                            || !pool.is_some_and(|p| {
                                p.startup_taints
                                    .iter()
                                    .any(|s| s.key == t.key && s.effect == t.effect)
                            })
                    })
                    .cloned()
                    .collect();
                let mut allocatable = resources.vector(n.allocatable);
                if !n.allocatable.contains_key(PODS) {
                    allocatable[POD_SLOT] = UNLIMITED;
                }
                let mut used = vec![0; resources.len()];
                let mut ports = Vec::new();
                let mut bound = Vec::new();
                for bp in &n.pods {
                    let r = resources.vector(bp.requests);
                    crate::resources::add(&mut used, &r);
                    if !bp.requests.contains_key(PODS) {
                        used[POD_SLOT] += 1;
                    }
                    ports.extend(bp.host_ports.iter().map(PortC::new));
                    let label_set = b.label_set(bp.namespace, bp.labels);
                    let anti = bp
                        .anti_affinity
                        .map(|a| {
                            a.required
                                .iter()
                                .map(|t| b.affinity_group(GroupKind::AntiAffinity, t, bp.namespace))
                                .collect()
                        })
                        .unwrap_or_default();
                    bound.push(BoundC { label_set, anti });
                }
                NodeC {
                    name: n.name.to_string(),
                    source,
                    initialized: n.initialized,
                    in_flight: n.in_flight,
                    pool: pool_index,
                    capacity: resources.vector(n.capacity.unwrap_or(n.allocatable)),
                    labels: intern_labels(n.labels, &mut b.strings),
                    taints,
                    allocatable,
                    used,
                    ports,
                    bound,
                }
            })
            .collect();

        let mut shapes = Vec::new();
        let mut shape_ids: FxHashMap<ShapeKey, u32> = FxHashMap::default();
        let node_index: FxHashMap<&str, u32> = if keyed.iter().any(|k| k.2.nominated_node.is_some())
        {
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i as u32))
                .collect()
        } else {
            FxHashMap::default()
        };
        let mut pods = Vec::with_capacity(keyed.len());
        for &(_, source, p) in &keyed {
            let key = ShapeKey::of(p);
            let shape = match shape_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = shapes.len() as u32;
                    shapes.push(b.shape(p, &resources));
                    shape_ids.insert(key, id);
                    id
                }
            };
            pods.push(PodC {
                shape,
                pod: p,
                source,
                nominated: p
                    .nominated_node
                    .as_deref()
                    .and_then(|n| node_index.get(n).copied()),
            });
        }

        // Which groups count which pods.
        for ls in &mut b.label_sets {
            ls.counted_in = b
                .groups
                .iter()
                .enumerate()
                .filter(|(_, g)| {
                    g.namespaces.binary_search(&ls.namespace).is_ok()
                        && g.selector.matches(&ls.labels)
                })
                .map(|(i, _)| i as u32)
                .collect();
        }

        let (universes, domain_index) =
            build_universes(&b.groups, &pools, &nodes, keys.hostname, &b.strings);

        let mut prepared = Prepared {
            strings: b.strings,
            resources,
            options: parts.options,
            pools,
            nodes,
            pods,
            shapes,
            groups: b.groups,
            label_sets: b.label_sets,
            universes,
            domain_index,
            keys,
            start: Start::empty(),
            reservations,
        };
        prepared.start = Start::new(&prepared);
        prepared
    }
}

type Universes = (FxHashMap<u32, Vec<u32>>, FxHashMap<(u32, u32), u32>);

/// Every value a topology key can take: what some NodePool can launch, and
/// the labels of existing nodes.
///
/// A NodePool supplies a value through an offering (available or not) that
/// fits the pool's requirements, of an instance type that fits them too: the
/// value is in the pool's, the type's and the offering's sets alike. A value
/// only one side names (a zone the pool excludes, a zone offered only as a
/// capacity type the pool refuses) is no domain: no node can ever be there,
/// so its count would stay zero and hold every other domain back. Karpenter
/// intersects the pool's and the type's requirements key by key and so still
/// counts a zone offered only as a refused capacity type
/// (kubernetes-sigs/karpenter#3272); Kubernetes never does, having no node
/// there.
fn build_universes(
    groups: &[GroupC],
    pools: &[PoolC],
    nodes: &[NodeC],
    hostname: u32,
    strings: &Interner,
) -> Universes {
    let keys: BTreeSet<u32> = groups
        .iter()
        .map(|g| g.key)
        .filter(|k| *k != hostname)
        .collect();
    let mut universes = FxHashMap::default();
    let mut index = FxHashMap::default();
    for key in keys {
        let mut values = BTreeSet::new();
        for pc in pools {
            for (t, ty) in pc.types.iter().enumerate() {
                if !pc.type_matches(t, &pc.reqs, strings) {
                    continue;
                }
                let base = match (pc.reqs.get(key), ty.reqs.get(key)) {
                    (Some(a), Some(b)) => Some(a.intersect(b, strings)),
                    (a, b) => a.or(b).cloned(),
                };
                for o in &ty.offerings {
                    if !offering_fits(o, &pc.reqs, strings) {
                        continue;
                    }
                    let set = match (&base, o.reqs.get(key)) {
                        (Some(a), Some(b)) => Some(a.intersect(b, strings)),
                        (a, b) => a.clone().or_else(|| b.cloned()),
                    };
                    if let Some(v) = set.as_ref().and_then(ValueSet::finite_values) {
                        values.extend(v.iter().copied());
                    }
                }
            }
        }
        for n in nodes {
            if let Some(v) = label_value(&n.labels, key) {
                values.insert(v);
            }
        }
        let mut values: Vec<u32> = values.into_iter().collect();
        values.sort_by(|a, b| strings.str(*a).cmp(strings.str(*b)));
        for (i, v) in values.iter().enumerate() {
            index.insert((key, *v), i as u32);
        }
        universes.insert(key, values);
    }
    (universes, index)
}

fn build_pool(
    p: &crate::snapshot::NodePool,
    b: &mut Builder,
    resources: &ResourceNames,
    daemons: &[(Reqs, &DaemonSet)],
    well_known: &[u32],
    reservations: &Reservations,
) -> PoolC {
    let mut reqs = Reqs::from_api(&p.requirements, &mut b.strings);
    for (k, v) in &p.labels {
        let k = b.strings.intern(k);
        let v = b.strings.intern(v);
        reqs.add(k, &ValueSet::single(v), &b.strings);
    }
    let np = b.strings.intern(NODE_POOL);
    let name = b.strings.intern(&p.name);
    reqs.add(np, &ValueSet::single(name), &b.strings);

    let mut types_in: Vec<&InstanceType> = p.instance_types.iter().collect();
    types_in.sort_by(|x, y| {
        cheapest_available(x, reservations)
            .total_cmp(&cheapest_available(y, reservations))
            .then_with(|| x.name.cmp(&y.name))
    });
    types_in.dedup_by(|x, y| x.name == y.name);
    let types: Vec<TypeC> = types_in
        .iter()
        .map(|t| {
            let mut offerings: Vec<&Offering> = t.offerings.iter().collect();
            offerings.sort_by(|x, y| {
                x.price
                    .total_cmp(&y.price)
                    .then_with(|| x.zone.cmp(&y.zone))
                    .then_with(|| x.capacity_type.cmp(&y.capacity_type))
            });
            TypeC {
                name: t.name.clone(),
                reqs: Reqs::from_api(&t.requirements, &mut b.strings),
                offerings: offerings
                    .iter()
                    .map(|o| {
                        let mut api = o.requirements.clone();
                        if let Some(z) = &o.zone {
                            api.push(crate::snapshot::Requirement::new(ZONE, Operator::In, &[z]));
                        }
                        api.push(crate::snapshot::Requirement::new(
                            CAPACITY_TYPE,
                            Operator::In,
                            &[&o.capacity_type],
                        ));
                        OfferingC {
                            reqs: Reqs::from_api(&api, &mut b.strings),
                            zone: o.zone.clone(),
                            capacity_type: o.capacity_type.clone(),
                            price: o.price,
                            available: reservations.usable(t, o),
                            reservation: reservations.of(t, o),
                            price_overlay: o.price_overlay.clone(),
                        }
                    })
                    .collect(),
                price_overlays: {
                    let mut names: Vec<String> = t
                        .offerings
                        .iter()
                        .filter_map(|o| o.price_overlay.clone())
                        .collect();
                    names.sort();
                    names.dedup();
                    names
                },
                capacity_overlays: t.capacity_overlays.clone(),
            }
        })
        .collect();

    let r = resources.len();
    let mut alloc = Vec::with_capacity(types.len() * r);
    let mut capacity = Vec::with_capacity(types.len() * r);
    for t in &types_in {
        let mut cap = resources.vector(&t.capacity);
        if !t.capacity.contains_key(PODS) {
            cap[POD_SLOT] = UNLIMITED;
        }
        let mut a = cap.clone();
        sub(&mut a, &resources.vector(&t.overhead.kube_reserved));
        sub(&mut a, &resources.vector(&t.overhead.system_reserved));
        sub(&mut a, &resources.vector(&t.overhead.eviction_threshold));
        alloc.extend(a);
        capacity.extend(cap);
    }
    let n = types.len();
    let fit = (0..r)
        .map(|ri| {
            let mut thresholds: Vec<i64> = (0..n).map(|t| alloc[t * r + ri]).collect();
            thresholds.sort_unstable();
            thresholds.dedup();
            let masks = thresholds
                .iter()
                .map(|&th| {
                    let mut m = Bits::empty(n);
                    for t in 0..n {
                        if alloc[t * r + ri] >= th {
                            m.set(t);
                        }
                    }
                    m
                })
                .collect();
            (thresholds, masks)
        })
        .collect();

    let mut defined: BTreeSet<u32> = reqs.entries().iter().map(|e| e.0).collect();
    defined.extend(well_known.iter().copied());
    let mut offering_keys = BTreeSet::new();
    for t in &types {
        defined.extend(t.reqs.entries().iter().map(|e| e.0));
        for o in &t.offerings {
            offering_keys.extend(o.reqs.entries().iter().map(|e| e.0));
        }
    }
    defined.extend(offering_keys.iter().copied());

    let mut limits = vec![None; r];
    for (k, v) in &p.limits {
        if let Some(i) = resources.index(k) {
            limits[i] = Some(*v);
        }
    }
    let node_limit = p.limits.get(vocabulary::resources::NODES).copied();

    let mut pool = PoolC {
        name: p.name.clone(),
        taints: p.taints.clone(),
        startup_taints: p.startup_taints.clone(),
        reqs,
        defined: defined.into_iter().collect(),
        types,
        alloc,
        capacity,
        fit,
        base_mask: Bits::empty(n),
        daemon_overhead: vec![0; r],
        limits,
        node_limit,
        offering_keys: offering_keys.into_iter().collect(),
    };
    for t in 0..n {
        if pool.type_matches(t, &pool.reqs, &b.strings)
            && pool.has_offering(t, &pool.reqs, &b.strings)
        {
            pool.base_mask.set(t);
        }
    }
    for (dreqs, ds) in daemons {
        let tolerated =
            crate::taints::first_untolerated(&pool.taints, &ds.tolerations, false).is_none();
        if tolerated && pool.incompatible_key(dreqs, &b.strings).is_none() {
            crate::resources::add(&mut pool.daemon_overhead, &resources.vector(&ds.requests));
        }
    }
    pool
}

impl PoolC {
    /// Whether instance type `t` can carry every requirement in `reqs`.
    pub(crate) fn type_matches(&self, t: usize, reqs: &Reqs, strings: &Interner) -> bool {
        reqs.entries()
            .iter()
            .all(|(k, set)| self.type_matches_key(t, *k, set, strings))
    }

    pub(crate) fn type_matches_key(
        &self,
        t: usize,
        key: u32,
        set: &ValueSet,
        strings: &Interner,
    ) -> bool {
        match self.types[t].reqs.get(key) {
            Some(ts) => ts.compatible(set, strings),
            // The label comes from the pool (a template label or a one-value
            // `In`, which nodes carry), from an offering or is well known, or
            // the requirement is happy without it. A pool's `Gt` or `Exists`
            // puts no label on a node: a type without the label cannot meet it.
            None => {
                self.reqs
                    .get(key)
                    .and_then(ValueSet::single_value)
                    .is_some()
                    || self.offering_keys.binary_search(&key).is_ok()
                    || set.allows_absence()
                    || WELL_KNOWN.contains(&strings.str(key))
            }
        }
    }

    /// Whether type `t` has an available offering compatible with `reqs`.
    pub(crate) fn has_offering(&self, t: usize, reqs: &Reqs, strings: &Interner) -> bool {
        self.types[t]
            .offerings
            .iter()
            .any(|o| o.available && offering_fits(o, reqs, strings))
    }

    /// Whether `t` has an offering for `reqs` that is not available now (out
    /// of capacity, over quota): what an explanation names.
    pub(crate) fn has_unavailable_offering(
        &self,
        t: usize,
        reqs: &Reqs,
        strings: &Interner,
    ) -> bool {
        self.types[t]
            .offerings
            .iter()
            .any(|o| !o.available && offering_fits(o, reqs, strings))
    }

    /// The first pod requirement key this pool cannot satisfy, if any.
    pub(crate) fn incompatible_key(&self, pod: &Reqs, strings: &Interner) -> Option<u32> {
        pod.entries().iter().find_map(|(k, ps)| {
            let ok = match self.reqs.get(*k) {
                Some(cs) => cs.compatible(ps, strings),
                None => ps.allows_absence() || self.defined.binary_search(k).is_ok(),
            };
            (!ok).then_some(*k)
        })
    }

    pub(crate) fn alloc_of(&self, t: usize, r: usize) -> i64 {
        self.alloc[t * self.fit.len() + r]
    }

    pub(crate) fn capacity_of(&self, t: usize, r: usize) -> i64 {
        self.capacity[t * self.fit.len() + r]
    }

    /// Types whose allocatable covers `requests`.
    pub(crate) fn fit_mask(&self, requests: &[i64], out: &mut Bits) {
        for (ri, &need) in requests.iter().enumerate() {
            if need <= 0 {
                continue;
            }
            let (thresholds, masks) = &self.fit[ri];
            let i = thresholds.partition_point(|&th| th < need);
            match masks.get(i) {
                Some(m) => out.and_with(m),
                None => {
                    *out = Bits::empty(self.types.len());
                    return;
                }
            }
        }
    }
}

pub(crate) fn offering_fits(o: &OfferingC, reqs: &Reqs, strings: &Interner) -> bool {
    o.reqs.entries().iter().all(|(k, os)| match reqs.get(*k) {
        Some(cs) => cs.compatible(os, strings),
        None => true,
    })
}
