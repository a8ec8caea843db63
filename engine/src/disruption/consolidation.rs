//! What consolidating a set of candidates would do: simulate their pods
//! elsewhere, then delete (no new NodeClaim), replace by one cheaper NodeClaim,
//! or do nothing (and say why, in Karpenter's words).

use crate::plan::Plan;
use crate::scheduler::run::Run;
use vocabulary::labels::CAPACITY_TYPE;

use super::Draft;
use super::candidates::{Candidate, sort_for_consolidation};
use super::cluster::Cluster;
use super::notes::Notes;
use super::plan::{KeepKind, KeepReason, Method};
use super::simulation::{Outcome, Simulator};
use super::snapshot::{ConsolidationPolicy, DisruptionReason};

const SPOT: &str = "spot";
const ON_DEMAND: &str = "on-demand";
/// A spot node is replaced by another spot node only when this many cheaper
/// types remain, so that the launch is not immediately consolidated again.
pub(crate) const MIN_SPOT_TO_SPOT_TYPES: usize = 15;
const NOT_CHEAPER: &str = "Can't replace with a cheaper node";

pub(crate) struct Ctx<'a, 'p> {
    pub(crate) cluster: &'a Cluster<'a>,
    pub(crate) cands: &'a [Candidate],
    pub(crate) sim: &'a Simulator<'p>,
    /// Per pool: its candidates' total price and total move cost, which the
    /// Balanced policy measures a move against.
    pub(crate) totals: Vec<(f64, f64)>,
}

impl<'a, 'p> Ctx<'a, 'p> {
    pub(crate) fn new(
        cluster: &'a Cluster<'a>,
        cands: &'a [Candidate],
        sim: &'a Simulator<'p>,
    ) -> Self {
        let mut totals = vec![(0.0, 0.0); cluster.pools.len()];
        for c in cands {
            if let Ok(p) = c.price
                && p > 0.0
            {
                totals[c.pool].0 += p;
                totals[c.pool].1 += c.move_cost;
            }
        }
        Ctx {
            cluster,
            cands,
            sim,
            totals,
        }
    }

    /// Candidates consolidation may look at, sorted; the others get their reason.
    pub(crate) fn eligible(&self, notes: &mut Notes) -> Vec<usize> {
        eligible(self.cluster, self.cands, notes)
    }
}

/// Why consolidation passes a candidate over.
enum PassedOver<'a> {
    /// consolidateAfter has not passed, or consolidation is off.
    NotConsolidatable(&'a KeepReason),
    /// A WhenEmpty pool; only a node with pods to move is told so.
    WhenEmpty { pods: bool, pool: &'a str },
    /// Its price is unknown.
    NoPrice(&'a str),
}

fn passed_over<'a>(cluster: &'a Cluster, c: &'a Candidate) -> Option<PassedOver<'a>> {
    let pool = &cluster.pools[c.pool];
    if let Err(why) = &c.consolidatable {
        return Some(PassedOver::NotConsolidatable(why));
    }
    if pool.spec.consolidation_policy == ConsolidationPolicy::WhenEmpty {
        return Some(PassedOver::WhenEmpty {
            pods: c.reschedulable > 0,
            pool: pool.name(),
        });
    }
    if let Err(why) = &c.price {
        return Some(PassedOver::NoPrice(why));
    }
    None
}

/// Whether consolidation may look at `c`: [`eligible`] without the notes.
pub(crate) fn considers(cluster: &Cluster, c: &Candidate) -> bool {
    passed_over(cluster, c).is_none()
}

/// Candidates consolidation may look at, sorted; the others get their reason.
pub(crate) fn eligible(cluster: &Cluster, cands: &[Candidate], notes: &mut Notes) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        match passed_over(cluster, c) {
            None => out.push(i),
            Some(PassedOver::NotConsolidatable(why)) => notes.add(c.node, why.clone()),
            Some(PassedOver::WhenEmpty { pods: false, .. }) => {}
            Some(PassedOver::WhenEmpty { pods: true, pool }) => notes.say(
                c.node,
                KeepKind::Unconsolidatable,
                format!("NodePool {pool:?} has non-empty consolidation disabled"),
            ),
            Some(PassedOver::NoPrice(why)) => {
                notes.say(c.node, KeepKind::Unconsolidatable, why.to_string())
            }
        }
    }
    sort_for_consolidation(cands, &mut out);
    out
}

/// Consolidates the candidates `picked` (indexes into [`Ctx::cands`]) as one
/// command, or says why not.
pub(crate) fn compute(ctx: &Ctx, picked: &[usize], method: Method) -> Result<Draft, String> {
    let cands: Vec<&Candidate> = picked.iter().map(|&i| &ctx.cands[i]).collect();
    let mut total = 0.0;
    for c in &cands {
        total += c.price.clone()?;
    }
    let nodes: Vec<usize> = cands.iter().map(|c| c.node).collect();
    let run = match ctx.sim.simulate(&nodes) {
        Outcome::Stuck(why) => return Err(why),
        Outcome::Placed(run) => *run,
    };
    let (replacements, price) = match run.st.claims.len() {
        0 => (run.into_plan(), 0.0),
        1 => replace(
            ctx,
            &cands,
            run,
            total,
            method == Method::MultiNodeConsolidation,
        )?,
        n => return Err(format!("Can't remove without creating {n} candidates")),
    };
    balanced(ctx, &cands, total - price, total)?;
    Ok(Draft {
        method,
        reason: DisruptionReason::Underutilized,
        nodes,
        replacements,
        candidates_price: total,
        replacements_price: price,
    })
}

/// The run made one NodeClaim: keep it only as a cheaper replacement.
fn replace(
    ctx: &Ctx,
    cands: &[&Candidate],
    mut run: Run,
    total: f64,
    multi: bool,
) -> Result<(Plan, f64), String> {
    let all_spot = cands.iter().all(|c| c.capacity_type == SPOT);
    let mut types = if all_spot && run.claim_allows(0, CAPACITY_TYPE, SPOT) {
        if !ctx.cluster.options.spot_to_spot_consolidation {
            return Err(
                "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                    .into(),
            );
        }
        run.narrow_claim(0, CAPACITY_TYPE, SPOT);
        let mut types = cheaper(&mut run, total);
        if types.is_empty() {
            return Err(NOT_CHEAPER.into());
        }
        if !multi {
            if types.len() < MIN_SPOT_TO_SPOT_TYPES {
                return Err(format!(
                    "SpotToSpotConsolidation requires {MIN_SPOT_TO_SPOT_TYPES} cheaper instance type options than the current candidate to consolidate, got {}",
                    types.len()
                ));
            }
            // Launch only from the cheapest few, so the new node is not
            // consolidated again at once.
            let ids: Vec<usize> = types.iter().map(|t| t.0).collect();
            let need = run.types_for_min_values(0, &ids).unwrap_or(ids.len());
            types.truncate(need.max(MIN_SPOT_TO_SPOT_TYPES));
        }
        types
    } else {
        // Priced as spot, so it must launch as spot: an on-demand fallback
        // could cost more than what it replaces.
        if run.claim_allows(0, CAPACITY_TYPE, SPOT) && run.claim_allows(0, CAPACITY_TYPE, ON_DEMAND)
        {
            run.narrow_claim(0, CAPACITY_TYPE, SPOT);
        }
        let types = cheaper(&mut run, total);
        if types.is_empty() {
            return Err(NOT_CHEAPER.into());
        }
        types
    };
    if multi {
        types = without_kept_types(&run, cands, types);
        if types.is_empty() {
            return Err(NOT_CHEAPER.into());
        }
    }
    let ids: Vec<usize> = types.iter().map(|t| t.0).collect();
    if run.types_for_min_values(0, &ids).is_none() {
        return Err("Filtering by price: minValues requirement is not met".into());
    }
    run.keep_claim_types(0, &ids);
    if let Some(why) = run.claim_error(0) {
        return Err(format!("Filtering by price: {why}"));
    }
    let plan = run.into_plan();
    let price = plan
        .new_node_claims
        .first()
        .and_then(|c| c.cheapest.as_ref())
        .map(|o| o.price)
        .ok_or_else(|| NOT_CHEAPER.to_string())?;
    Ok((plan, price))
}

/// The replacement's types priced below `limit`, cheapest first.
fn cheaper(run: &mut Run, limit: f64) -> Vec<(usize, f64)> {
    run.claim_prices(0)
        .into_iter()
        .filter(|(_, p)| *p < limit)
        .collect()
}

/// Replacing several nodes by one of their own types is no better than
/// keeping that node and deleting the others: only types cheaper than the
/// cheapest such candidate stay.
fn without_kept_types(
    run: &Run,
    cands: &[&Candidate],
    mut types: Vec<(usize, f64)>,
) -> Vec<(usize, f64)> {
    let mut max_price = f64::INFINITY;
    for (t, _) in &types {
        let name = run.claim_type_name(0, *t);
        for c in cands.iter().filter(|c| c.instance_type == name) {
            if let Ok(p) = c.price {
                max_price = max_price.min(p);
            }
        }
    }
    types.retain(|(_, p)| *p < max_price);
    types
}

/// The Balanced policy: each Balanced pool in the move must find its share of
/// the savings worth its share of the disruption.
fn balanced(ctx: &Ctx, cands: &[&Candidate], savings: f64, total: f64) -> Result<(), String> {
    let mut pools: Vec<usize> = cands.iter().map(|c| c.pool).collect();
    pools.sort_unstable();
    pools.dedup();
    for &pool in &pools {
        let spec = ctx.cluster.pools[pool].spec;
        if spec.consolidation_policy != ConsolidationPolicy::Balanced {
            continue;
        }
        let mine: Vec<&&Candidate> = cands.iter().filter(|c| c.pool == pool).collect();
        let cost: f64 = mine.iter().filter_map(|c| c.price.clone().ok()).sum();
        let share = if pools.len() > 1 && total > 0.0 {
            savings * cost / total
        } else {
            savings
        };
        let disruption: f64 = mine.iter().map(|c| c.move_cost).sum();
        let (pool_cost, pool_disruption) = ctx.totals[pool];
        let threshold = 1.0 / f64::from(spec.consolidation_threshold.max(1));
        let score = if pool_cost <= 0.0 || share <= 0.0 {
            0.0
        } else if pool_disruption <= 0.0 || disruption <= 0.0 {
            f64::INFINITY
        } else {
            (share / pool_cost) / (disruption / pool_disruption)
        };
        if score < threshold {
            return Err(format!(
                "NodePool {:?} is Balanced: saving {:.1}% of its cost for {:.1}% of its disruption cost scores {:.2}, below {:.2}",
                ctx.cluster.pools[pool].name(),
                100.0 * share / pool_cost.max(f64::MIN_POSITIVE),
                100.0 * disruption / pool_disruption.max(f64::MIN_POSITIVE),
                score,
                threshold
            ));
        }
    }
    Ok(())
}
