//! Output types: what the provisioner should do.

use serde::{Deserialize, Serialize};

use crate::labels::INSTANCE_TYPE;
use crate::snapshot::{Operator, Requirement, ResourceList};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// In creation order; [`Target::NewNodeClaim`] indexes into this list.
    pub new_node_claims: Vec<NewNodeClaim>,
    /// Sorted by namespace, name, uid.
    pub placements: Vec<Placement>,
    /// Sorted by namespace, name, uid.
    pub unschedulable: Vec<Unschedulable>,
}

impl Plan {
    /// Sum of the cheapest offering of every new NodeClaim, $/hour.
    pub fn total_price_per_hour(&self) -> f64 {
        self.new_node_claims
            .iter()
            .filter_map(|c| c.cheapest.as_ref())
            .map(|o| o.price)
            .sum()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// Sorted by key. Includes `node.kubernetes.io/instance-type In [...]` with the
    /// compatible types cheapest first, and narrowed zone and capacity type.
    pub requirements: Vec<Requirement>,
    /// The pods' summed requests plus daemonset overhead.
    pub requests: ResourceList,
    /// The cheapest compatible offering, for display and cost estimates.
    pub cheapest: Option<OfferingChoice>,
    /// The pods that will land here, in scheduling order.
    pub pods: Vec<PodRef>,
}

impl NewNodeClaim {
    /// The instance types to launch from, cheapest first.
    pub fn instance_types(&self) -> &[String] {
        self.requirements
            .iter()
            .find(|r| r.key == INSTANCE_TYPE && r.operator == Operator::In)
            .map(|r| r.values.as_slice())
            .unwrap_or(&[])
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferingChoice {
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: String,
    pub price: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub pod: PodRef,
    pub target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// An existing node or in-flight NodeClaim, by name.
    ExistingNode(String),
    /// Index into [`Plan::new_node_claims`].
    NewNodeClaim(usize),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unschedulable {
    pub pod: PodRef,
    /// Why, in words a person understands.
    pub reason: String,
}
