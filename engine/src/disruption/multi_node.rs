//! Multi-node consolidation: the largest prefix of the sorted candidates (at
//! most 100, within budgets) that can go at once, found by binary search.

use super::Draft;
use super::budgets::Budgets;
use super::consolidation::{self, Ctx};
use super::plan::Method;
use super::snapshot::DisruptionReason;

const MAX_CANDIDATES: usize = 100;

/// `eligible`: candidate indexes in consolidation order.
pub(crate) fn run(ctx: &Ctx, eligible: &[usize], mut budgets: Budgets) -> Option<Draft> {
    // Budgets are taken up front, in order, so that every prefix tried fits.
    let mut list: Vec<usize> = eligible
        .iter()
        .copied()
        .filter(|&i| budgets.take(ctx.cands[i].pool, DisruptionReason::Underutilized))
        .collect();
    list.truncate(MAX_CANDIDATES);
    // One node at a time is single-node consolidation's job.
    if list.len() < 2 {
        return None;
    }
    let mut best = None;
    // Prefix lengths 2..=len: `mid` is the last index included.
    let (mut lo, mut hi) = (1, list.len() - 1);
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match consolidation::compute(ctx, &list[..=mid], Method::MultiNodeConsolidation) {
            Ok(draft) => {
                best = Some(draft);
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    best
}
