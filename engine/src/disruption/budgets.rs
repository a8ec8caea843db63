//! Disruption budgets: how many nodes each NodePool may lose, per reason, now.
//!
//! allowed = max(min over active budgets for the reason - (NotReady + deleting), 0).
//! Percentages of the pool's initialized nodes round up. A budget that cannot
//! be read blocks the whole pool, as Karpenter fails closed.

use super::cluster::Cluster;
use super::cron::Schedule;
use super::duration;
use super::plan::PoolBudget;
use super::snapshot::{Budget, DisruptionReason};

/// What "no budget applies" allows (Karpenter's MaxInt32).
pub(crate) const UNLIMITED: i64 = i32::MAX as i64;

const REASONS: [DisruptionReason; 4] = [
    DisruptionReason::Underutilized,
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Unhealthy,
];

fn slot(reason: DisruptionReason) -> usize {
    match reason {
        DisruptionReason::Underutilized => 0,
        DisruptionReason::Empty => 1,
        DisruptionReason::Drifted => 2,
        DisruptionReason::Unhealthy => 3,
    }
}

/// Disruptions left per pool (by [`Cluster::pools`] index) and reason. Each
/// method starts from a fresh copy and takes from it as it adds candidates.
#[derive(Debug, Clone)]
pub(crate) struct Budgets {
    left: Vec<[i64; 4]>,
}

impl Budgets {
    /// `expired[n]`: node `n` is about to go, so it counts as deleting.
    pub(crate) fn new(c: &Cluster, expired: &[bool]) -> Budgets {
        let mut total = vec![0i64; c.pools.len()];
        let mut disrupting = vec![0i64; c.pools.len()];
        // Repair's budget does not count NotReady nodes: they are what it
        // repairs, and would otherwise use up the budget that repairs them.
        let mut leaving = vec![0i64; c.pools.len()];
        for (i, n) in c.nodes.iter().enumerate() {
            let Some(pool) = n.pool else { continue };
            // Only initialized nodes count, so that replacements still coming
            // up do not inflate a percentage.
            if !n.node.initialized || n.node.in_flight {
                continue;
            }
            total[pool] += 1;
            let going = n.node.deleting || expired.get(i).copied().unwrap_or(false);
            if n.node.not_ready || going {
                disrupting[pool] += 1;
            }
            if going {
                leaving[pool] += 1;
            }
        }
        let left = c
            .pools
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                let mut out = [0; 4];
                for reason in REASONS {
                    let allowed = allowed(&pool.spec.budgets, total[i], reason, c.now).unwrap_or(0);
                    let taken = match reason {
                        DisruptionReason::Unhealthy => leaving[i],
                        _ => disrupting[i],
                    };
                    out[slot(reason)] = (allowed - taken).max(0);
                }
                out
            })
            .collect();
        Budgets { left }
    }

    pub(crate) fn left(&self, pool: usize, reason: DisruptionReason) -> i64 {
        self.left.get(pool).map_or(0, |l| l[slot(reason)])
    }

    /// Takes one disruption from the pool's budget, if any is left.
    pub(crate) fn take(&mut self, pool: usize, reason: DisruptionReason) -> bool {
        match self.left.get_mut(pool) {
            Some(l) if l[slot(reason)] > 0 => {
                l[slot(reason)] -= 1;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn report(&self, c: &Cluster) -> Vec<PoolBudget> {
        let mut out = Vec::new();
        for (i, pool) in c.pools.iter().enumerate() {
            for reason in REASONS {
                out.push(PoolBudget {
                    node_pool: pool.name().to_string(),
                    reason,
                    allowed: self.left(i, reason),
                });
            }
        }
        out.sort_by(|a, b| (&a.node_pool, a.reason).cmp(&(&b.node_pool, b.reason)));
        out
    }
}

/// Karpenter's words when a budget leaves nothing.
pub(crate) fn blocked_message(reason: DisruptionReason) -> String {
    format!(
        "No allowed disruptions for disruption reason {} due to blocking budget",
        reason.as_str()
    )
}

/// The most restrictive active budget for `reason` over a pool of `nodes`
/// nodes, before subtracting what is already disrupting. `Err` when a budget
/// cannot be read.
pub(crate) fn allowed(
    budgets: &[Budget],
    nodes: i64,
    reason: DisruptionReason,
    now: i64,
) -> Result<i64, String> {
    let mut min = UNLIMITED;
    for b in budgets {
        let value = scaled(&b.nodes, nodes)?;
        let active = is_active(b, now)?;
        if active && (b.reasons.is_empty() || b.reasons.contains(&reason)) {
            min = min.min(value);
        }
    }
    Ok(min)
}

/// "N" or "N%" of `nodes`, rounding up.
fn scaled(text: &str, nodes: i64) -> Result<i64, String> {
    let bad = || format!("invalid budget nodes {text:?}");
    let t = text.trim();
    match t.strip_suffix('%') {
        Some(pct) => {
            let pct: i64 = pct.parse().map_err(|_| bad())?;
            if pct < 0 {
                return Err(bad());
            }
            Ok((pct.saturating_mul(nodes) + 99).div_euclid(100))
        }
        None => {
            let n: i64 = t.parse().map_err(|_| bad())?;
            if n < 0 {
                return Err(bad());
            }
            Ok(n)
        }
    }
}

fn is_active(b: &Budget, now: i64) -> Result<bool, String> {
    match (&b.schedule, &b.duration) {
        (None, None) => Ok(true),
        (Some(schedule), Some(d)) => {
            let schedule = Schedule::parse(schedule)?;
            let d = duration::parse(d)?;
            Ok(schedule.active(d, now))
        }
        _ => Err("a budget's schedule and duration go together".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(nodes: &str) -> Budget {
        Budget {
            nodes: nodes.to_string(),
            ..Budget::default()
        }
    }

    #[test]
    fn percentages_round_up_and_the_smallest_wins() {
        let r = DisruptionReason::Underutilized;
        assert_eq!(allowed(&[budget("10%")], 10, r, 0), Ok(1));
        assert_eq!(allowed(&[budget("10%")], 11, r, 0), Ok(2));
        assert_eq!(allowed(&[budget("5%")], 10, r, 0), Ok(1));
        assert_eq!(allowed(&[budget("0%")], 10, r, 0), Ok(0));
        assert_eq!(allowed(&[budget("100%")], 0, r, 0), Ok(0));
        assert_eq!(allowed(&[budget("3"), budget("50%")], 10, r, 0), Ok(3));
        assert_eq!(allowed(&[budget("30%"), budget("5")], 10, r, 0), Ok(3));
        assert_eq!(allowed(&[], 10, r, 0), Ok(UNLIMITED));
        assert!(allowed(&[budget("x")], 10, r, 0).is_err());
        assert!(allowed(&[budget("-1")], 10, r, 0).is_err());
    }

    #[test]
    fn reasons_select_budgets() {
        let mut drift_only = budget("0");
        drift_only.reasons = vec![DisruptionReason::Drifted];
        let all = budget("2");
        let budgets = [drift_only, all];
        assert_eq!(allowed(&budgets, 10, DisruptionReason::Drifted, 0), Ok(0));
        assert_eq!(allowed(&budgets, 10, DisruptionReason::Empty, 0), Ok(2));
    }

    #[test]
    fn scheduled_budgets_apply_inside_their_window() {
        // 2024-05-15 09:00 UTC, a Wednesday.
        let nine = 1_715_763_600;
        let mut b = budget("0");
        b.schedule = Some("0 9 * * *".to_string());
        b.duration = Some("8h".to_string());
        let r = DisruptionReason::Empty;
        assert_eq!(
            allowed(std::slice::from_ref(&b), 10, r, nine - 60),
            Ok(UNLIMITED)
        );
        assert_eq!(allowed(std::slice::from_ref(&b), 10, r, nine), Ok(0));
        assert_eq!(
            allowed(std::slice::from_ref(&b), 10, r, nine + 8 * 3600 - 1),
            Ok(0)
        );
        assert_eq!(
            allowed(std::slice::from_ref(&b), 10, r, nine + 8 * 3600),
            Ok(UNLIMITED)
        );
        b.duration = None;
        assert!(allowed(&[b], 10, r, nine).is_err());
    }
}
