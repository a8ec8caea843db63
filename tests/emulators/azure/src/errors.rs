//! The errors ARM answers a create with, worded as ARM words them: which
//! PUT gets each (the NIC's or the VM's), whether it is refused at once with
//! an HTTP status or accepted and failed in its async operation (placement
//! failures are), and the message. An injection that names one of these
//! codes and no message gets this one.

use serde_json::{Value, json};

/// Whose PUT an error answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Vm,
    Nic,
}

impl Resource {
    pub fn parse(s: &str) -> Option<Resource> {
        match s.to_ascii_lowercase().as_str() {
            "vm" | "virtualmachines" => Some(Resource::Vm),
            "nic" | "networkinterfaces" => Some(Resource::Nic),
            _ => None,
        }
    }
}

/// What the messages quote from the request.
pub struct Context<'a> {
    pub location: &'a str,
    pub vm_size: &'a str,
    /// The ARM id of the resource being created.
    pub id: &'a str,
    pub image: &'a str,
    pub subnet: &'a str,
}

/// How ARM answers a create with `code`.
pub struct Known {
    pub resource: Resource,
    /// The status of a synchronous refusal; none: the operation fails.
    pub status: Option<u16>,
    pub message: String,
}

/// The identity the messages name as the caller.
const CLIENT: &str = "00000000-0000-0000-0000-00000000c11e";

pub fn known(code: &str, c: &Context) -> Option<Known> {
    let (resource, status, message) = match code {
        "AllocationFailed" => (
            Resource::Vm,
            None,
            "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance".to_string(),
        ),
        "ZonalAllocationFailed" => (
            Resource::Vm,
            None,
            "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance".to_string(),
        ),
        "OverconstrainedAllocationRequest" | "OverconstrainedZonalAllocationRequest" => (
            Resource::Vm,
            None,
            "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive. Please remove some constraints and try again. Constraints applied are:\n  - Networking Constraints (such as Accelerated Networking or IPv6)\n  - VM Size\n".to_string(),
        ),
        "SkuNotAvailable" => (
            Resource::Vm,
            Some(409),
            format!(
                "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: {}' is currently not available in location '{}'. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details.",
                c.vm_size, c.location
            ),
        ),
        "SubnetIsFull" => (
            Resource::Nic,
            Some(400),
            format!(
                "Subnet {} with address prefix 10.224.0.0/16 does not have enough capacity for 1 IP addresses.",
                c.subnet.rsplit('/').next().unwrap_or(c.subnet)
            ),
        ),
        "GalleryImageNotFound" => (
            Resource::Vm,
            Some(404),
            format!(
                "The gallery image {} is not available in {} region. Please contact image owner to replicate to this region, or change your requested region.",
                c.image, c.location
            ),
        ),
        "AuthorizationFailed" => (
            Resource::Vm,
            Some(403),
            format!(
                "The client '{CLIENT}' with object id '{CLIENT}' does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write' over scope '{}' or the scope is invalid. If access was recently granted, please refresh your credentials.",
                c.id
            ),
        ),
        "LinkedAuthorizationFailed" => (
            Resource::Nic,
            Some(403),
            format!(
                "The client '{CLIENT}' with object id '{CLIENT}' has permission to perform action 'Microsoft.Network/networkInterfaces/write' on scope '{}'; however, it does not have permission to perform action(s) 'Microsoft.Network/virtualNetworks/subnets/join/action' on the linked scope(s) '{}' (respectively) or the linked scope(s) are invalid.",
                c.id, c.subnet
            ),
        ),
        _ => return None,
    };
    Some(Known {
        resource,
        status,
        message,
    })
}

/// ARM's error body.
pub fn body(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "details": []}})
}
