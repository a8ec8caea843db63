//! Expiration: a managed node is replaced once `created + expireAfter` has
//! passed. Forceful, so it is its own list rather than a budgeted command.

use super::cluster::{Cluster, ms};

/// Per node of [`Cluster::nodes`]: whether it has expired.
pub(crate) fn expired(c: &Cluster) -> Vec<bool> {
    let now = c.now_ms();
    c.nodes
        .iter()
        .map(|n| {
            n.pool.is_some()
                && !n.node.deleting
                && n.expire_after
                    .is_some_and(|d| ms(n.node.created).saturating_add(d) <= now)
        })
        .collect()
}
