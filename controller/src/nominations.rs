//! Nodes and NodeClaims the provisioner just planned pending pods onto.
//! Disruption leaves them alone for a while: the pods are on their way, and
//! an empty-looking node that is about to receive them is not empty. The
//! next batch plans each pod still pending onto the same node first, so the
//! nodes made for a batch are not repacked (and outgrown) while the pods
//! wait for kube-scheduler.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a nomination holds: two maximum batch windows, as in Karpenter.
const HOLD: Duration = Duration::from_secs(20);

#[derive(Default)]
pub struct Nominations {
    until: Mutex<HashMap<String, Instant>>,
    /// Pod uid to the node or NodeClaim the last batch planned it onto.
    pods: Mutex<HashMap<String, String>>,
}

impl Nominations {
    pub fn nominate(&self, name: &str, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.retain(|_, t| *t > now);
        until.insert(name.to_string(), now + HOLD);
    }

    /// Where the last batch planned its pods: every pod it did not place is
    /// forgotten, as each batch plans every pending pod again.
    pub fn plan_pods(&self, placed: HashMap<String, String>) {
        *self.pods.lock().unwrap_or_else(|e| e.into_inner()) = placed;
    }

    /// Gives each pod the node the last batch planned it onto; `node_of`
    /// names the Node a NodeClaim registered as, where it has.
    pub fn apply(&self, pods: &mut [engine::Pod], node_of: impl Fn(&str) -> Option<String>) {
        let planned = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        if planned.is_empty() {
            return;
        }
        for p in pods {
            if let Some(name) = planned.get(&p.uid) {
                p.nominated_node = Some(node_of(name).unwrap_or_else(|| name.clone()));
            }
        }
    }

    /// The names whose nomination still holds at `now`.
    pub fn current(&self, now: Instant) -> BTreeSet<String> {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_holds_for_twenty_seconds() {
        let n = Nominations::default();
        let t = Instant::now();
        n.nominate("a", t);
        assert!(n.current(t + Duration::from_secs(19)).contains("a"));
        assert!(n.current(t + Duration::from_secs(21)).is_empty());
    }

    #[test]
    fn pods_keep_the_node_of_the_last_plan_under_its_node_name() {
        let n = Nominations::default();
        let pod = |uid: &str| engine::Pod {
            uid: uid.into(),
            ..engine::Pod::default()
        };
        n.plan_pods(HashMap::from([
            ("a".into(), "claim-1".into()),
            ("b".into(), "node-2".into()),
        ]));
        let mut pods = vec![pod("a"), pod("b"), pod("c")];
        n.apply(&mut pods, |claim| {
            (claim == "claim-1").then(|| "node-for-claim-1".into())
        });
        let got: Vec<_> = pods.iter().map(|p| p.nominated_node.as_deref()).collect();
        assert_eq!(got, [Some("node-for-claim-1"), Some("node-2"), None]);

        n.plan_pods(HashMap::from([("c".into(), "node-3".into())]));
        let mut pods = vec![pod("a"), pod("c")];
        n.apply(&mut pods, |_| None);
        let got: Vec<_> = pods.iter().map(|p| p.nominated_node.as_deref()).collect();
        assert_eq!(got, [None, Some("node-3")]);
    }
}
