//! Output types: what the provisioner should do.

use serde::{Deserialize, Serialize};

use crate::snapshot::{Operator, Requirement, ResourceList};
use vocabulary::labels::INSTANCE_TYPE;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// In creation order; [`Target::NewNodeClaim`] indexes into this list.
    pub new_node_claims: Vec<NewNodeClaim>,
    /// Names that [`NewNodeClaim::instance_types`] index into. Shared so that a
    /// plan with thousands of NodeClaims of hundreds of types each stays small.
    pub instance_types: Vec<String>,
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
            // An empty float sum is -0.0.
            .fold(0.0, |a, b| a + b)
    }

    /// The pods planned onto a new NodeClaim.
    pub fn pods_of<'a>(&'a self, claim: &'a NewNodeClaim) -> impl Iterator<Item = &'a PodRef> + 'a {
        claim
            .pods
            .iter()
            .filter_map(|&i| self.placements.get(i as usize))
            .map(|p| &p.pod)
    }

    /// The instance type names of a new NodeClaim, cheapest first.
    pub fn instance_type_names<'a>(
        &'a self,
        claim: &'a NewNodeClaim,
    ) -> impl Iterator<Item = &'a str> + 'a {
        claim
            .instance_types
            .iter()
            .filter_map(|&i| self.instance_types.get(i as usize))
            .map(String::as_str)
    }

    /// The full requirements to put on the NodeClaim: [`NewNodeClaim::requirements`]
    /// plus `node.kubernetes.io/instance-type In [...]` (cheapest first), sorted by key.
    /// A claim that lists no types (a static NodePool's template) keeps its
    /// own instance-type requirements.
    pub fn node_claim_requirements(&self, claim: &NewNodeClaim) -> Vec<Requirement> {
        let mut out = claim.requirements.clone();
        if claim.instance_types.is_empty() {
            out.sort_by(|a, b| a.key.cmp(&b.key));
            return out;
        }
        out.retain(|r| r.key != INSTANCE_TYPE);
        out.push(Requirement {
            key: INSTANCE_TYPE.to_string(),
            operator: Operator::In,
            values: self
                .instance_type_names(claim)
                .map(str::to_string)
                .collect(),
            min_values: claim.instance_type_min_values,
        });
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewNodeClaim {
    pub node_pool: String,
    /// Sorted by key, with zone and capacity type narrowed to what the chosen
    /// instance types offer. The instance types themselves are in
    /// `instance_types`; [`Plan::node_claim_requirements`] puts them together.
    pub requirements: Vec<Requirement>,
    /// Compatible instance types, cheapest first, at most
    /// `Options::max_instance_types`: indexes into [`Plan::instance_types`].
    pub instance_types: Vec<u32>,
    /// `minValues` on the instance-type requirement, if the NodePool sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type_min_values: Option<u32>,
    /// The pods' summed requests plus daemonset overhead.
    pub requests: ResourceList,
    /// The cheapest compatible offering, for display and cost estimates.
    pub cheapest: Option<OfferingChoice>,
    /// The pods that will land here, in scheduling order: indexes into
    /// [`Plan::placements`].
    pub pods: Vec<u32>,
    /// NodeOverlays that priced an offering of its instance types, and that
    /// added to their capacity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub price_overlays: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_overlays: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferingChoice {
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: String,
    pub price: f64,
    /// The NodeOverlay that set this price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_overlay: Option<String>,
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
