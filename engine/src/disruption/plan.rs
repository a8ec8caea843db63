//! Output: the command to execute, why every other node stays, which nodes
//! expired, and the budgets it was decided under.

use serde::{Deserialize, Serialize};

use crate::plan::Plan;

use super::snapshot::DisruptionReason;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DisruptionPlan {
    /// At most one command per decision: the first method that finds one.
    pub command: Option<Command>,
    /// Managed nodes past `created + expireAfter`, by name. Expiration is
    /// forceful: no budget, PDB or do-not-disrupt holds it back.
    pub expired: Vec<String>,
    /// Every other managed node, by name, with why it stays.
    pub kept: Vec<KeptNode>,
    /// Disruptions allowed per NodePool and reason this round, by pool then reason.
    pub budgets: Vec<PoolBudget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Command {
    pub method: Method,
    pub reason: DisruptionReason,
    /// The nodes to delete, by name.
    pub candidates: Vec<String>,
    /// The simulation the command rests on: `new_node_claims` are the
    /// replacements to create (and wait for) before deleting the candidates;
    /// `placements` say where every evicted pod goes.
    pub replacements: Plan,
    /// What the candidates cost, $/hour (0 when a price is unknown, as for drift).
    pub candidates_price: f64,
    /// What the replacements cost, $/hour (their cheapest offerings).
    pub replacements_price: f64,
    /// `candidates_price - replacements_price`.
    pub savings: f64,
}

impl Command {
    /// Karpenter's decision: `Delete` without replacements, else `Replace`.
    pub fn is_replace(&self) -> bool {
        !self.replacements.new_node_claims.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Method {
    Emptiness,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Emptiness => "Emptiness",
            Method::Drift => "Drift",
            Method::MultiNodeConsolidation => "MultiNodeConsolidation",
            Method::SingleNodeConsolidation => "SingleNodeConsolidation",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptNode {
    pub name: String,
    pub node_pool: String,
    /// At least one, in the order the methods ran.
    pub reasons: Vec<KeepReason>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KeepReason {
    pub kind: KeepKind,
    /// In Karpenter's words where Karpenter has some.
    pub message: String,
}

/// The event a reason maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KeepKind {
    /// Karpenter's DisruptionBlocked: the node may not be disrupted now.
    DisruptionBlocked,
    /// Karpenter's Unconsolidatable: consolidation looked and found nothing.
    Unconsolidatable,
    /// Nothing wrong, nothing to publish: not its turn (on its way up,
    /// nominated, consolidateAfter, another command first) or not asked for
    /// (consolidateAfter: Never).
    Waiting,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolBudget {
    pub node_pool: String,
    pub reason: DisruptionReason,
    /// max(budget - (NotReady + deleting nodes), 0).
    pub allowed: i64,
}
