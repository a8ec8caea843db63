//! Static NodePools (Karpenter's `StaticCapacity` gate): a NodePool with
//! `spec.replicas` keeps exactly that many NodeClaims, whatever the pods, as
//! far as `limits.nodes` allows. Scaling down removes the NodeClaims that cost
//! least to remove: those not launched yet, then empty nodes, then those with
//! the fewest pods, nodes with a do-not-disrupt pod last, as Karpenter picks.

/// A NodeClaim of a static NodePool, not being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticClaim {
    pub name: String,
    pub launched: bool,
    /// Pods on its node, daemonset pods aside.
    pub pods: u32,
    /// A pod on it, or the node, says `karpenter.sh/do-not-disrupt`.
    pub do_not_disrupt: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scale {
    pub create: u32,
    /// NodeClaims to delete, in the order given.
    pub delete: Vec<String>,
}

/// What brings `claims` to `replicas`.
pub fn scale(replicas: u32, node_limit: Option<u32>, claims: &[StaticClaim]) -> Scale {
    let have = claims.len() as u32;
    if have < replicas {
        let room = node_limit.map_or(u32::MAX, |l| l.saturating_sub(have));
        return Scale {
            create: (replicas - have).min(room),
            delete: Vec::new(),
        };
    }
    let mut order: Vec<&StaticClaim> = claims.iter().collect();
    order.sort_by(|a, b| {
        a.launched
            .cmp(&b.launched)
            .then(a.do_not_disrupt.cmp(&b.do_not_disrupt))
            .then(a.pods.cmp(&b.pods))
            .then_with(|| a.name.cmp(&b.name))
    });
    Scale {
        create: 0,
        delete: order
            .into_iter()
            .take((have - replicas) as usize)
            .map(|c| c.name.clone())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, launched: bool, pods: u32, do_not_disrupt: bool) -> StaticClaim {
        StaticClaim {
            name: name.into(),
            launched,
            pods,
            do_not_disrupt,
        }
    }

    #[test]
    fn it_creates_what_is_missing_within_the_node_limit() {
        let one = [claim("a", true, 0, false)];
        assert_eq!(scale(3, None, &one).create, 2);
        assert_eq!(scale(3, Some(2), &one).create, 1);
        assert_eq!(scale(3, Some(1), &one).create, 0);
        assert_eq!(scale(1, None, &one), Scale::default());
    }

    #[test]
    fn scaling_down_removes_what_costs_least_first() {
        let claims = [
            claim("busy", true, 5, false),
            claim("protected", true, 0, true),
            claim("empty", true, 0, false),
            claim("launching", false, 0, false),
            claim("light", true, 1, false),
        ];
        assert_eq!(
            scale(1, None, &claims).delete,
            ["launching", "empty", "light", "busy"]
        );
        assert_eq!(scale(3, None, &claims).delete, ["launching", "empty"]);
    }
}
