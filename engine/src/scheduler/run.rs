//! One scheduling run: the queue loop over some of a prepared snapshot's pods,
//! and the [`Plan`] it renders.
//!
//! Provisioning runs it over every pod. Disruption runs it over the pods of
//! the nodes it would remove, with those nodes left out, then may edit the
//! NodeClaim the run made (cheaper types only, spot only) before rendering.

use std::collections::VecDeque;

use crate::plan::{Placement, Plan, Target, Unschedulable};
use crate::requirements::ValueSet;

use super::class::Relax;
use super::explain;
use super::output::{self, OfferingCache};
use super::prepare::Prepared;
use super::reservations::reserve;
use super::state::{Spot, State, distinct_values};

pub(crate) struct Run<'p> {
    pub(crate) st: State<'p>,
    /// The pods placed in this run: indexes into [`Prepared::pods`], ascending,
    /// which is Karpenter's order. NodeClaims list pods by position here.
    pub(crate) pods: Vec<u32>,
    /// Per entry of `pods`: where it went.
    pub(crate) spots: Vec<Option<Spot>>,
    relax: Vec<Relax>,
    /// Per entry of `pods`: why it was held out of the queue, if it was.
    held: Vec<Option<String>>,
    offerings: OfferingCache,
}

impl<'p> Run<'p> {
    /// Schedules `pods` (indexes into [`Prepared::pods`]) with the existing
    /// nodes marked in `removed` left out.
    pub(crate) fn new(p: &'p Prepared<'p>, removed: &[bool], pods: Vec<u32>) -> Self {
        Self::with_settled(p, removed, pods, |_| false)
    }

    /// As [`Run::new`], but the pods for which `settled_only` holds skip
    /// existing nodes that are not initialized yet.
    ///
    /// Reservation slots go to NodeClaims only once the queue has run, so a
    /// NodeClaim that can launch nothing but reservations others took loses
    /// its pods after they counted towards topology spread. Its pods are then
    /// held out and the queue runs again, until every NodeClaim it makes can
    /// launch: the pods placed never lean on a count that is not in the plan.
    pub(crate) fn with_settled(
        p: &'p Prepared<'p>,
        removed: &[bool],
        mut pods: Vec<u32>,
        settled_only: impl Fn(u32) -> bool,
    ) -> Self {
        pods.sort_unstable();
        pods.dedup();
        let mut held: Vec<Option<String>> = vec![None; pods.len()];
        loop {
            let mut run = Self::queue(p, removed, pods, held, &settled_only);
            let lost = run.claims_without_reservation();
            if lost.iter().all(Option::is_none) {
                return run;
            }
            for (i, spot) in run.spots.iter().enumerate() {
                if let Some(Spot::Claim(c)) = spot
                    && let Some(why) = &lost[*c]
                {
                    run.held[i] = Some(why.clone());
                }
            }
            pods = run.pods;
            held = run.held;
        }
    }

    /// The queue loop over `pods`, less those `held` out.
    fn queue(
        p: &'p Prepared<'p>,
        removed: &[bool],
        pods: Vec<u32>,
        held: Vec<Option<String>>,
        settled_only: &impl Fn(u32) -> bool,
    ) -> Self {
        let mut st = State::new(p, removed);
        let n = pods.len();
        let mut relax = vec![Relax::initial(p.options.preference_policy); n];
        let mut spots: Vec<Option<Spot>> = vec![None; n];
        let mut queue: VecDeque<u32> = (0..n as u32)
            .filter(|&i| held[i as usize].is_none())
            .collect();
        // Karpenter's stop rule: a pod popped at the queue length it was pushed
        // with means a whole cycle passed without progress. Relaxing counts as
        // progress (it starts a new generation).
        let mut generation = 0u32;
        let mut pushed_at: Vec<Option<(u32, usize)>> = vec![None; n];
        while let Some(&i) = queue.front() {
            let iu = i as usize;
            if pushed_at[iu] == Some((generation, queue.len())) {
                break;
            }
            queue.pop_front();
            let pod = &p.pods[pods[iu] as usize];
            let cls = st.class_for(pod.shape, relax[iu]);
            if let Some(s) = st.place(i, cls, settled_only(pods[iu]), pod.nominated) {
                spots[iu] = Some(s);
                continue;
            }
            match relax[iu].next(&p.shapes[pod.shape as usize]) {
                Some(r) => {
                    relax[iu] = r;
                    generation += 1;
                    queue.push_back(i);
                }
                None => {
                    queue.push_back(i);
                    pushed_at[iu] = Some((generation, queue.len()));
                }
            }
        }
        Run {
            st,
            pods,
            spots,
            relax,
            held,
            offerings: OfferingCache::default(),
        }
    }

    /// Per NodeClaim, in the order they were made (the order slots go in):
    /// why it cannot launch when every reservation it could launch into is
    /// taken.
    fn claims_without_reservation(&mut self) -> Vec<Option<String>> {
        let p = self.st.p;
        if p.reservations.list.is_empty() {
            return vec![None; self.st.claims.len()];
        }
        let mut left = p.reservations.left();
        self.st
            .claims
            .iter()
            .map(|claim| reserve(p, &mut claim.clone(), &mut left, &mut self.offerings).err())
            .collect()
    }

    /// Why pod `i` of this run found no place, in words.
    pub(crate) fn explain(&mut self, i: usize) -> String {
        let p = self.st.p;
        let shape = p.pods[self.pods[i] as usize].shape;
        let cls = self.st.class_for(shape, self.relax[i]);
        explain::explain(&mut self.st, cls)
    }

    /// NodeClaim `c`'s instance types, each with the price of its cheapest
    /// available offering that fits the claim, cheapest first.
    pub(crate) fn claim_prices(&mut self, c: usize) -> Vec<(usize, f64)> {
        let p = self.st.p;
        output::priced_types(p, &self.st.claims[c], &mut self.offerings)
            .into_iter()
            .map(|(t, o)| (t, o.price))
            .collect()
    }

    /// Keeps only the instance types `keep` on NodeClaim `c`.
    pub(crate) fn keep_claim_types(&mut self, c: usize, keep: &[usize]) {
        let claim = &mut self.st.claims[c];
        let mut mask = crate::bitset::Bits::empty(self.st.p.pools[claim.pool].types.len());
        for &t in keep {
            mask.set(t);
        }
        claim.mask.and_with(&mask);
    }

    /// Whether NodeClaim `c` allows `key = value` (no requirement allows it).
    pub(crate) fn claim_allows(&self, c: usize, key: &str, value: &str) -> bool {
        let strings = &self.st.p.strings;
        let Some(k) = strings.lookup(key) else {
            return true;
        };
        match self.st.claims[c].reqs.get(k) {
            None => true,
            Some(set) => strings
                .lookup(value)
                .is_some_and(|v| set.contains(v, strings)),
        }
    }

    /// Narrows NodeClaim `c` to `key = value`; `false` when no value is known
    /// by that name (nothing offers it).
    pub(crate) fn narrow_claim(&mut self, c: usize, key: &str, value: &str) -> bool {
        let strings = &self.st.p.strings;
        let (Some(k), Some(v)) = (strings.lookup(key), strings.lookup(value)) else {
            return false;
        };
        let claim = &mut self.st.claims[c];
        claim.reqs.add(k, &ValueSet::single(v), strings);
        true
    }

    pub(crate) fn claim_type_name(&self, c: usize, t: usize) -> &'p str {
        let p = self.st.p;
        p.pools[self.st.claims[c].pool]
            .types
            .get(t)
            .map_or("", |ty| ty.name.as_str())
    }

    /// How many of `types` (cheapest first) it takes to meet the pool's
    /// `minValues`; `None` when all of them do not.
    pub(crate) fn types_for_min_values(&self, c: usize, types: &[usize]) -> Option<usize> {
        let p = self.st.p;
        let pool = self.st.claims[c].pool;
        let mins = p.pools[pool].reqs.min_values();
        if mins.is_empty() {
            return Some(0);
        }
        let mut mask = crate::bitset::Bits::empty(p.pools[pool].types.len());
        for (i, &t) in types.iter().enumerate() {
            mask.set(t);
            if mins
                .iter()
                .all(|&(key, min)| distinct_values(p, pool, &mask, key) >= min as usize)
            {
                return Some(i + 1);
            }
        }
        None
    }

    /// Why NodeClaim `c` could not be written out as it stands (minValues
    /// lost to the instance-type cap), if it could not.
    pub(crate) fn claim_error(&mut self, c: usize) -> Option<String> {
        let p = self.st.p;
        let (_, names) = output::name_table(p);
        output::node_claim(p, &self.st.claims[c], &mut self.offerings, &names).err()
    }

    /// Renders the run as a [`Plan`].
    pub(crate) fn into_plan(mut self) -> Plan {
        let p = self.st.p;
        let n = self.pods.len();
        let mut plan = Plan::default();
        let mut claims = std::mem::take(&mut self.st.claims);
        let mut claim_index = vec![None; claims.len()];
        let mut failed_claims: Vec<(usize, String)> = Vec::new();
        let (names, name_index) = output::name_table(p);
        plan.instance_types = names;
        // Reservation slots go to NodeClaims in the order they were made.
        let mut left = p.reservations.left();
        for (c, claim) in claims.iter_mut().enumerate() {
            let made = reserve(p, claim, &mut left, &mut self.offerings)
                .and_then(|()| output::node_claim(p, claim, &mut self.offerings, &name_index));
            match made {
                Ok(nc) => {
                    claim_index[c] = Some(plan.new_node_claims.len());
                    plan.new_node_claims.push(nc);
                }
                Err(why) => failed_claims.push((c, why)),
            }
        }
        // Pod -> its index in `plan.placements` before sorting.
        let mut placement_of: Vec<Option<usize>> = vec![None; n];
        for (i, placed) in placement_of.iter_mut().enumerate() {
            let pod = p.pods[self.pods[i] as usize].pod_ref();
            match self.spots[i] {
                Some(Spot::Node(node)) => {
                    *placed = Some(plan.placements.len());
                    plan.placements.push(Placement {
                        pod,
                        target: Target::ExistingNode(p.nodes[node].name.clone()),
                    });
                }
                Some(Spot::Claim(c)) => match claim_index[c] {
                    Some(idx) => {
                        *placed = Some(plan.placements.len());
                        plan.placements.push(Placement {
                            pod,
                            target: Target::NewNodeClaim(idx),
                        });
                    }
                    None => {
                        let why = failed_claims
                            .iter()
                            .find(|f| f.0 == c)
                            .map(|f| f.1.clone())
                            .unwrap_or_default();
                        plan.unschedulable.push(Unschedulable { pod, reason: why });
                    }
                },
                None => {
                    let reason = match &self.held[i] {
                        Some(why) => why.clone(),
                        None => self.explain(i),
                    };
                    plan.unschedulable.push(Unschedulable { pod, reason });
                }
            }
        }
        // Placements sorted by pod; NodeClaims list their pods (in scheduling
        // order) by placement index.
        let mut order: Vec<usize> = (0..plan.placements.len()).collect();
        order.sort_by(|&a, &b| plan.placements[a].pod.cmp(&plan.placements[b].pod));
        let mut new_index = vec![0u32; plan.placements.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u32;
        }
        let mut sorted: Vec<Option<Placement>> = plan.placements.drain(..).map(Some).collect();
        plan.placements = order.iter().filter_map(|&i| sorted[i].take()).collect();
        for (c, claim) in claims.iter().enumerate() {
            if let Some(idx) = claim_index[c] {
                plan.new_node_claims[idx].pods = claim
                    .pods
                    .iter()
                    .filter_map(|&pod| placement_of[pod as usize])
                    .map(|i| new_index[i])
                    .collect();
            }
        }
        plan.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        plan
    }
}
