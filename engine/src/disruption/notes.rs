//! Why each node stays, gathered as the methods run.

use super::plan::{KeepKind, KeepReason};

pub(crate) struct Notes {
    /// Per node of [`super::cluster::Cluster::nodes`], in the order found.
    by_node: Vec<Vec<KeepReason>>,
}

impl Notes {
    pub(crate) fn new(nodes: usize) -> Self {
        Notes {
            by_node: vec![Vec::new(); nodes],
        }
    }

    /// Adds a reason unless the node already has the same one.
    pub(crate) fn add(&mut self, node: usize, reason: KeepReason) {
        if let Some(list) = self.by_node.get_mut(node)
            && !list.contains(&reason)
        {
            list.push(reason);
        }
    }

    pub(crate) fn say(&mut self, node: usize, kind: KeepKind, message: impl Into<String>) {
        self.add(
            node,
            KeepReason {
                kind,
                message: message.into(),
            },
        );
    }

    pub(crate) fn take(&mut self, node: usize) -> Vec<KeepReason> {
        self.by_node
            .get_mut(node)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}
