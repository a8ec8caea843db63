//! Cloud resources that outlived their machine: a network interface or a
//! disk made for a launch whose machine was never created, or was removed
//! without them. A provider lists each as an instance of its own, so the
//! host's garbage collection deletes it once no NodeClaim owns it.

use crate::bindings::karpenter::provider::types::{Instance, InstanceState};

/// The instance a leftover resource is listed as. Its `provider_id` must be
/// the resource's own, never the machine's: a NodeClaim whose machine is
/// gone must still count as gone. It has no creation time, so the host
/// waits for a second pass without an owner before deleting it; `delete`
/// is then called with a NodeClaim of `node_claim`'s name.
pub fn leftover(node_claim: String, node_pool: String, provider_id: String) -> Instance {
    Instance {
        node_claim,
        node_pool,
        provider_id,
        image_id: String::new(),
        instance_type: String::new(),
        zone: String::new(),
        capacity_type: String::new(),
        state: InstanceState::Pending,
        labels: vec![],
        capacity: vec![],
        allocatable: vec![],
        created_at: None,
    }
}
