//! Expiration: a managed node is replaced once `created + expireAfter` has
//! passed. Forceful, so it is its own list rather than a budgeted command.

use super::cluster::{Cluster, ms};

/// Per node of [`Cluster::nodes`]: whether it has expired.
pub(crate) fn expired(c: &Cluster) -> Vec<bool> {
    let now = c.now_ms();
    c.nodes
        .iter()
        .map(|n| {
            let Some(pool) = n.pool.map(|i| &c.pools[i]) else {
                return false;
            };
            !n.node.deleting
                && pool
                    .expire_after
                    .is_some_and(|d| ms(n.node.created).saturating_add(d) <= now)
        })
        .collect()
}
