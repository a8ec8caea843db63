//! Spot eviction as Azure gives it: a Scheduled Event `Preempt` whose
//! NotBefore is at least 30 s ahead, which the AKS node-problem-detector on
//! the VM turns into the Node condition `PreemptionScheduled=True` (reason
//! `SpotEvictionIncoming`, message `Preempt Scheduled: <NotBefore, RFC
//! 1123>. …`). At NotBefore the platform deletes the VM (its eviction
//! policy is Delete) and the NIC that goes with it, and the Node's kubelet
//! is gone with them.

use super::Kube;
use serde_json::{Value, json};

/// An eviction on its way: announced on the Node first, carried out at
/// `not_before`.
#[derive(Clone)]
pub struct Eviction {
    pub vm_key: String,
    pub node: String,
    pub not_before: jiff::Timestamp,
    pub event_id: String,
    pub announced: bool,
}

/// The Node condition the node-problem-detector sets, as a status patch.
pub fn notice(e: &Eviction, now: jiff::Timestamp) -> Value {
    let not_before = e.not_before.strftime("%a, %d %b %Y %H:%M:%S GMT");
    json!({"status": {"conditions": [{
        "type": "PreemptionScheduled",
        "status": "True",
        "reason": "SpotEvictionIncoming",
        "message": format!(
            "Preempt Scheduled: {not_before}. For more information, see https://aka.ms/scheduledevents. EventId: {}",
            e.event_id
        ),
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }]}})
}

/// Patches the condition onto the Node's status (a strategic merge: the
/// other conditions stay).
pub async fn announce(http: &reqwest::Client, kube: &Kube, e: &Eviction) -> anyhow::Result<()> {
    let url = format!(
        "{}/api/v1/nodes/{}/status",
        kube.endpoint.trim_end_matches('/'),
        e.node
    );
    let r = http
        .patch(url)
        .bearer_auth(&kube.token)
        .header("content-type", "application/strategic-merge-patch+json")
        .body(notice(e, jiff::Timestamp::now()).to_string())
        .send()
        .await?;
    if !r.status().is_success() {
        anyhow::bail!(
            "PATCH node {} status: {}: {}",
            e.node,
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_reads_as_the_node_problem_detector_writes_it() {
        let e = Eviction {
            vm_key: "rg/vm".into(),
            node: "vm".into(),
            not_before: "2026-12-05T19:30:02Z".parse().expect("time"),
            event_id: "40B7BD88-C56E-44E4-93F6-75CEDACE2869".into(),
            announced: false,
        };
        let n = notice(&e, "2026-12-05T19:29:32Z".parse().expect("time"));
        let c = &n["status"]["conditions"][0];
        assert_eq!(c["type"], "PreemptionScheduled");
        assert_eq!(
            c["message"],
            "Preempt Scheduled: Sat, 05 Dec 2026 19:30:02 GMT. For more information, see https://aka.ms/scheduledevents. EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869"
        );
        assert_eq!(c["lastTransitionTime"], "2026-12-05T19:29:32Z");
    }
}
