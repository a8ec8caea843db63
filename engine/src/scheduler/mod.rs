//! The provisioning scheduler: places pending pods on existing nodes and on
//! new NodeClaims, the way Karpenter's provisioner does.
//!
//! Read in this order: `prepare` (the compiled snapshot), `class` (a pod with
//! its preferences relaxed so far), `state` (trying and committing placements),
//! `topology` (spread and pod (anti-)affinity counts), `masks` (instance-type
//! bitsets), `output` and `explain` (the plan).

mod class;
mod explain;
mod masks;
mod order;
mod output;
pub(crate) mod prepare;
mod state;
mod topology;

use std::collections::VecDeque;

use crate::plan::{Placement, Plan, Target, Unschedulable};
use crate::snapshot::Snapshot;

pub use prepare::Prepared;

use class::Relax;
use state::{Spot, State};

/// Schedules the snapshot's pending pods. Same input, same plan, whatever the
/// order of its collections.
pub fn schedule(snapshot: &Snapshot) -> Plan {
    schedule_prepared(&Prepared::new(snapshot))
}

/// Schedules an already prepared snapshot (prepare once, schedule many times).
pub fn schedule_prepared(p: &Prepared) -> Plan {
    let mut st = State::new(p);
    let n = p.pods.len();
    let mut relax = vec![Relax::initial(p.options.preference_policy); n];
    let mut spot: Vec<Option<Spot>> = vec![None; n];
    let mut queue: VecDeque<u32> = (0..n as u32).collect();
    // Karpenter's stop rule: a pod popped at the queue length it was pushed
    // with means a whole cycle passed without progress. Relaxing counts as
    // progress (it starts a new generation).
    let mut generation = 0u32;
    let mut pushed_at: Vec<Option<(u32, usize)>> = vec![None; n];
    while let Some(&i) = queue.front() {
        if pushed_at[i as usize] == Some((generation, queue.len())) {
            break;
        }
        queue.pop_front();
        let shape = p.pods[i as usize].shape;
        let cls = st.class_for(shape, relax[i as usize]);
        if let Some(s) = st.place(i, cls) {
            spot[i as usize] = Some(s);
            continue;
        }
        match relax[i as usize].next(&p.shapes[shape as usize]) {
            Some(r) => {
                relax[i as usize] = r;
                generation += 1;
                queue.push_back(i);
            }
            None => {
                queue.push_back(i);
                pushed_at[i as usize] = Some((generation, queue.len()));
            }
        }
    }

    let mut plan = Plan::default();
    let mut claim_index = vec![None; st.claims.len()];
    let mut failed_claims: Vec<(usize, String)> = Vec::new();
    let mut offerings = output::OfferingCache::default();
    let (names, name_index) = output::name_table(p);
    plan.instance_types = names;
    for (c, claim) in st.claims.iter().enumerate() {
        match output::node_claim(p, claim, &mut offerings, &name_index) {
            Ok(nc) => {
                claim_index[c] = Some(plan.new_node_claims.len());
                plan.new_node_claims.push(nc);
            }
            Err(why) => failed_claims.push((c, why)),
        }
    }
    // Pod index -> its index in `plan.placements` before sorting.
    let mut placement_of: Vec<Option<usize>> = vec![None; n];
    for (i, s) in spot.iter().enumerate() {
        let pod = p.pods[i].pod_ref();
        if matches!(s, Some(Spot::Node(_)))
            || matches!(s, Some(Spot::Claim(c)) if claim_index[*c].is_some())
        {
            placement_of[i] = Some(plan.placements.len());
        }
        match s {
            Some(Spot::Node(node)) => plan.placements.push(Placement {
                pod,
                target: Target::ExistingNode(p.nodes[*node].name.clone()),
            }),
            Some(Spot::Claim(c)) => match claim_index[*c] {
                Some(idx) => plan.placements.push(Placement {
                    pod,
                    target: Target::NewNodeClaim(idx),
                }),
                None => {
                    let why = failed_claims
                        .iter()
                        .find(|f| f.0 == *c)
                        .map(|f| f.1.clone())
                        .unwrap_or_default();
                    plan.unschedulable.push(Unschedulable { pod, reason: why });
                }
            },
            None => {
                let shape = p.pods[i].shape;
                let cls = st.class_for(shape, relax[i]);
                let reason = explain::explain(&mut st, cls);
                plan.unschedulable.push(Unschedulable { pod, reason });
            }
        }
    }
    // Placements sorted by pod; NodeClaims list their pods (in scheduling
    // order) by placement index.
    let mut by_pod: Vec<(usize, u32)> = plan
        .placements
        .iter()
        .enumerate()
        .map(|(i, _)| (i, 0))
        .collect();
    let mut order: Vec<usize> = (0..plan.placements.len()).collect();
    order.sort_by(|&a, &b| plan.placements[a].pod.cmp(&plan.placements[b].pod));
    for (new, &old) in order.iter().enumerate() {
        by_pod[old].1 = new as u32;
    }
    let mut sorted: Vec<Option<Placement>> = plan.placements.drain(..).map(Some).collect();
    plan.placements = order.iter().filter_map(|&i| sorted[i].take()).collect();
    for (c, claim) in st.claims.iter().enumerate() {
        if let Some(idx) = claim_index[c] {
            plan.new_node_claims[idx].pods = claim
                .pods
                .iter()
                .filter_map(|&pod| placement_of[pod as usize])
                .map(|i| by_pod[i].1)
                .collect();
        }
    }
    plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
    plan
}
