//! Where would the pods go? The scheduler run with some nodes removed.
//!
//! The cluster is prepared for scheduling once per decision, with every pod
//! that may have to move (pending pods, and the pods of candidates and of
//! nodes going away) among its pods to place; each simulation then runs the
//! scheduler over a subset with the nodes it removes left out. As in
//! Karpenter, pending pods and the pods of deleting nodes are placed in
//! every simulation.

use crate::plan::PodRef;
use crate::scheduler::prepare::{BoundRef, NodeRef, Parts, Prepared};
use crate::scheduler::run::Run;
use crate::scheduler::state::Spot;
use crate::snapshot::Pod;

use super::cluster::Cluster;

/// At most this many pods are named when pods would not schedule.
const MAX_NAMED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Pending,
    /// On a node already going away.
    Leaving,
    /// On this candidate (an index into [`Cluster::nodes`]).
    Candidate(usize),
}

/// Which pods the prepared cluster places and where they come from; kept
/// apart from [`Prepared`], which borrows them.
pub(crate) struct Inputs<'s> {
    pods: Vec<&'s Pod>,
    origin: Vec<Origin>,
    /// Per node of [`Cluster::nodes`]: going away (deleting or expired).
    leaving: Vec<bool>,
}

impl<'s> Inputs<'s> {
    /// `moving`: the nodes (indexes into [`Cluster::nodes`]) simulations may
    /// remove, whose pods are prepared for placing elsewhere.
    pub(crate) fn new(c: &Cluster<'s>, moving: &[usize], expired: &[bool]) -> Self {
        let mut is_candidate = vec![false; c.nodes.len()];
        for &n in moving {
            is_candidate[n] = true;
        }
        let mut pods: Vec<&'s Pod> = c.pending.clone();
        let mut origin = vec![Origin::Pending; pods.len()];
        let mut leaving = Vec::with_capacity(c.nodes.len());
        for (i, n) in c.nodes.iter().enumerate() {
            let gone = n.node.deleting || expired.get(i).copied().unwrap_or(false);
            if gone || is_candidate[i] {
                let o = if gone {
                    Origin::Leaving
                } else {
                    Origin::Candidate(i)
                };
                for p in n.reschedulable() {
                    pods.push(&p.pod);
                    origin.push(o);
                }
            }
            leaving.push(gone);
        }
        Inputs {
            pods,
            origin,
            leaving,
        }
    }

    /// Every node stays in (nodes going away are left out of each run), so
    /// that their capacity still counts against NodePool limits.
    pub(crate) fn prepare(&self, c: &Cluster<'s>) -> Prepared<'s> {
        let nodes = c
            .nodes
            .iter()
            .map(|n| {
                let node = n.node;
                NodeRef {
                    name: &node.name,
                    node_pool: node.node_pool.as_deref(),
                    labels: &node.labels,
                    taints: &node.taints,
                    allocatable: &node.allocatable,
                    capacity: node.capacity.as_ref(),
                    initialized: node.initialized,
                    in_flight: node.in_flight,
                    awaiting_launch: node.awaiting_launch,
                    pods: n.pods.iter().map(|p| BoundRef::of_pod(&p.pod)).collect(),
                }
            })
            .collect();
        Prepared::from_parts(Parts {
            node_pools: c.pools.iter().map(|p| &p.spec.pool).collect(),
            nodes,
            daemon_sets: c.daemon_sets.clone(),
            pods: self.pods.clone(),
            options: c.options.scheduling,
        })
    }
}

pub(crate) struct Simulator<'p> {
    p: &'p Prepared<'p>,
    /// Per pod of `p`: where it comes from.
    origin: Vec<Origin>,
    /// Per node of [`Cluster::nodes`]: its index in `p.nodes`.
    node_index: Vec<Option<usize>>,
    /// Per node of [`Cluster::nodes`]: its pods that move, as `p.pods` indexes.
    moving: Vec<Vec<u32>>,
    /// Pods placed in every simulation.
    always: Vec<u32>,
    /// Per node of `p`: left out of every simulation.
    removed: Vec<bool>,
}

/// A simulation's verdict.
pub(crate) enum Outcome<'p> {
    /// Every moving pod has a place: the run, with any NodeClaims it made.
    Placed(Box<Run<'p>>),
    /// Karpenter's "Not all pods would schedule, ..." message.
    Stuck(String),
}

impl<'p> Simulator<'p> {
    pub(crate) fn new(inputs: &Inputs, p: &'p Prepared<'p>, cluster_nodes: usize) -> Self {
        let mut origin = vec![Origin::Pending; p.pods.len()];
        let mut moving = vec![Vec::new(); cluster_nodes];
        let mut always = Vec::new();
        for (i, pod) in p.pods.iter().enumerate() {
            let o = inputs
                .origin
                .get(pod.source as usize)
                .copied()
                .unwrap_or(Origin::Pending);
            origin[i] = o;
            match o {
                Origin::Pending | Origin::Leaving => always.push(i as u32),
                Origin::Candidate(n) => moving[n].push(i as u32),
            }
        }
        let mut node_index = vec![None; cluster_nodes];
        let mut removed = vec![false; p.nodes.len()];
        for (i, node) in p.nodes.iter().enumerate() {
            // Prepared from `Cluster::nodes` in order: the source is the index.
            let n = node.source as usize;
            if let Some(slot) = node_index.get_mut(n) {
                *slot = Some(i);
            }
            removed[i] = inputs.leaving.get(n).copied().unwrap_or(false);
        }
        Simulator {
            p,
            origin,
            node_index,
            moving,
            always,
            removed,
        }
    }

    /// Schedules with `nodes` (indexes into [`Cluster::nodes`]) removed. A
    /// moving pod that would land on a node not initialized yet makes the
    /// move wait for it, as Karpenter's consolidation does: once that node is
    /// up, the pod may fit there with no new node at all.
    pub(crate) fn simulate(&self, nodes: &[usize]) -> Outcome<'p> {
        self.run(nodes, false)
    }

    /// As [`Simulator::simulate`], for nodes that go whatever it costs
    /// (drift): their pods pass over nodes not initialized yet and find
    /// another place, so a replacement still coming up for an earlier command
    /// does not hold this one back.
    pub(crate) fn simulate_replacing(&self, nodes: &[usize]) -> Outcome<'p> {
        self.run(nodes, true)
    }

    fn run(&self, nodes: &[usize], moving_settled_only: bool) -> Outcome<'p> {
        let mut removed = self.removed.clone();
        let mut pods = self.always.clone();
        for &n in nodes {
            if let Some(i) = self.node_index.get(n).copied().flatten() {
                removed[i] = true;
            }
            if let Some(m) = self.moving.get(n) {
                pods.extend_from_slice(m);
            }
        }
        let mut run = Run::with_settled(self.p, &removed, pods, |pod| {
            moving_settled_only && matches!(self.origin[pod as usize], Origin::Candidate(_))
        });
        // Pending pods may stay pending; evicted pods must land, and not on a
        // node that is not initialized yet (it may never be). `None`: no place.
        let mut stuck: Vec<(PodRef, usize, Option<String>)> = Vec::new();
        for i in 0..run.pods.len() {
            let pod = run.pods[i] as usize;
            let pod_ref = || self.p.pods[pod].pod_ref();
            match (self.origin[pod], run.spots[i]) {
                (Origin::Pending, _) => {}
                (_, None) => stuck.push((pod_ref(), i, None)),
                (Origin::Candidate(_), Some(Spot::Node(n))) => {
                    let node = &self.p.nodes[n];
                    if !node.settled() {
                        let kind = if node.in_flight { "nodeclaim" } else { "node" };
                        let why =
                            format!("would schedule against uninitialized {kind}/{}", node.name);
                        stuck.push((pod_ref(), i, Some(why)));
                    }
                }
                _ => {}
            }
        }
        if stuck.is_empty() {
            return Outcome::Placed(Box::new(run));
        }
        stuck.sort_by(|a, b| a.0.cmp(&b.0));
        let mut parts = Vec::new();
        for (pod, i, why) in stuck.iter().take(MAX_NAMED) {
            let why = match why {
                Some(w) => w.clone(),
                None => run.explain(*i),
            };
            parts.push(format!("{}/{} => {why}", pod.namespace, pod.name));
        }
        let mut message = format!("Not all pods would schedule, {}", parts.join("; "));
        if stuck.len() > MAX_NAMED {
            message.push_str(&format!(" and {} other(s)", stuck.len() - MAX_NAMED));
        }
        Outcome::Stuck(message)
    }
}
