//! The NodePool hash: a fingerprint of the template fields whose change
//! makes existing nodes drift. Requirements are left out: a node drifts on
//! them only when its own labels stop satisfying them.

use crate::crds::NodePool;
use sha2::{Digest, Sha256};

/// Bumped when the hashed fields change, so a new controller does not see
/// every node as drifted.
pub const VERSION: &str = "v3";

pub fn node_pool_hash(np: &NodePool) -> String {
    let t = &np.spec.template;
    let hashed = serde_json::json!({
        "metadata": t.metadata,
        "taints": t.spec.taints,
        "startupTaints": t.spec.startup_taints,
        "nodeClassRef": t.spec.node_class_ref,
        "expireAfter": t.spec.expire_after,
        "terminationGracePeriod": t.spec.termination_grace_period,
    });
    let digest = Sha256::digest(hashed.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first).to_string()
}
