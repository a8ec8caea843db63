//! Single-node consolidation: the first candidate, in order, that can be
//! deleted or replaced by a cheaper node on its own.

use super::Draft;
use super::budgets::{self, Budgets};
use super::consolidation::{self, Ctx};
use super::notes::Notes;
use super::plan::{KeepKind, Method};
use super::snapshot::DisruptionReason;

/// `eligible`: candidate indexes in consolidation order.
pub(crate) fn run(
    ctx: &Ctx,
    eligible: &[usize],
    budgets: &Budgets,
    notes: &mut Notes,
) -> Option<Draft> {
    let reason = DisruptionReason::Underutilized;
    for &i in eligible {
        let c = &ctx.cands[i];
        // Empty nodes are emptiness's: if it left one, a budget kept it.
        if c.reschedulable == 0 {
            continue;
        }
        if budgets.left(c.pool, reason) == 0 {
            notes.say(
                c.node,
                KeepKind::DisruptionBlocked,
                budgets::blocked_message(reason),
            );
            continue;
        }
        match consolidation::compute(ctx, &[i], Method::SingleNodeConsolidation) {
            Ok(draft) => return Some(draft),
            Err(why) => notes.say(c.node, KeepKind::Unconsolidatable, why),
        }
    }
    None
}
