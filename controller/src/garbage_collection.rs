//! Garbage collection, both ways: cloud instances that no NodeClaim owns
//! (older than a grace period, so a launch in progress is never taken for a
//! leak) are deleted, and launched NodeClaims whose instance is gone are
//! deleted so their pods get a new node.
//!
//! It acts only on positive evidence: a plugin's answers count once it has
//! been shown every NodeClass since it was loaded (it may learn from them
//! where its instances are), an instance is gone only when `get` says
//! not-found, and a plugin that lists nothing while NodeClaims say it
//! launched instances deletes at most one of them a pass: a plugin that lost
//! sight of its cloud looks exactly like a cloud that lost everything.

use super::Ctx;
use crate::crds::NodeClaim;
use crate::records;
use karpenter_runtime::{Plugin, wit};
use kube::ResourceExt;
use kube::api::Api;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// An instance younger than this may still be on its way to its NodeClaim.
pub const INSTANCE_GRACE: Duration = Duration::from_secs(30);

pub async fn run(ctx: Arc<Ctx>) {
    let mut tick = tokio::time::interval(ctx.options.gc_interval);
    // Instances without a NodeClaim seen on the previous pass: ones with no
    // creation time are collected on the second sighting.
    let mut suspects = BTreeSet::new();
    loop {
        tick.tick().await;
        if let Err(e) = pass(&ctx, &mut suspects).await {
            tracing::warn!(error = format!("{e:#}"), "garbage collection");
        }
    }
}

pub async fn pass(ctx: &Ctx, suspects: &mut BTreeSet<String>) -> anyhow::Result<()> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let mut seen = BTreeSet::new();
    for plugin in ctx.registry.plugins() {
        if !plugin.node_classes_seen() {
            tracing::debug!(plugin = %plugin.name, "garbage collection waits until the plugin has been shown every NodeClass");
            continue;
        }
        let Some(found) = survey(ctx, &plugin, suspects, &mut seen).await else {
            continue;
        };
        for i in &found.orphans {
            // The store may lag behind a NodeClaim just created: ask the API server.
            if api.get_opt(&i.node_claim).await?.is_some() {
                continue;
            }
            tracing::warn!(plugin = %plugin.name, provider_id = %i.provider_id, nodeclaim = %i.node_claim, "deleting an instance no NodeClaim owns");
            let claim = orphan(i, &plugin.metadata);
            match plugin.delete(&claim).await {
                Ok(()) => {}
                Err(e) if matches!(e.provider_error(), Some(wit::Error::NotFound(_))) => {}
                Err(e) => {
                    tracing::warn!(provider_id = %i.provider_id, error = %e, "deleting a leaked instance")
                }
            }
        }
        let mut gone = Vec::new();
        for c in &found.unlisted {
            let Some(id) = c.provider_id() else { continue };
            // A list can miss an instance; only a not-found from get counts.
            if let Err(e) = plugin.get(id).await
                && matches!(e.provider_error(), Some(wit::Error::NotFound(_)))
            {
                gone.push((c, id));
            }
        }
        let bound = gone_deletions_bound(found.listed, found.launched);
        for (i, (c, id)) in gone.into_iter().enumerate() {
            if i >= bound {
                tracing::warn!(plugin = %plugin.name, nodeclaim = %c.name_any(), provider_id = id, "instance reported gone by a plugin that lists none; deletion deferred to a later pass");
                ctx.events
                    .warning(
                        &**c,
                        "GarbageCollectionDeferred",
                        format!("Plugin {} lists no instance while {} NodeClaims say it launched some; {id} is reported gone, and at most {bound} such NodeClaim is deleted a pass", plugin.name, found.launched),
                    )
                    .await;
                continue;
            }
            tracing::warn!(nodeclaim = %c.name_any(), provider_id = id, "instance is gone; deleting its NodeClaim");
            ctx.events
                .warning(
                    &**c,
                    "InstanceGone",
                    format!("Instance {id} no longer exists"),
                )
                .await;
            super::lifecycle::delete_node_claim(ctx, c).await?;
        }
    }
    *suspects = seen;
    Ok(())
}

/// What one plugin's list says needs a closer look. The list itself, every
/// instance the plugin runs, is dropped before any call that waits on a
/// cloud.
struct Survey {
    /// Instances no stored NodeClaim owns, past the grace period.
    orphans: Vec<wit::Instance>,
    /// Launched NodeClaims of this plugin whose instance the list lacks.
    unlisted: Vec<Arc<NodeClaim>>,
    /// Instances listed, and launched NodeClaims of this plugin not being deleted.
    listed: usize,
    launched: usize,
}

/// How many NodeClaims one pass may delete because their instance is gone:
/// all of them, unless the plugin listed no instance at all while NodeClaims
/// say it launched some. Then one a pass: an outage that took every instance
/// is still cleaned up, and a plugin that cannot see its cloud (a restart
/// before it knows where to look, a lost credential) removes no fleet.
pub fn gone_deletions_bound(listed: usize, launched: usize) -> usize {
    if listed == 0 && launched > 0 {
        1
    } else {
        usize::MAX
    }
}

/// Lists the plugin's instances and compares them with the stored
/// NodeClaims; `None` if the plugin cannot list. Instances without a
/// NodeClaim are added to `seen`.
async fn survey(
    ctx: &Ctx,
    plugin: &Plugin,
    suspects: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
) -> Option<Survey> {
    let _turn = ctx.whole_cluster_pass.lock().await;
    let instances = match plugin.list().await {
        Ok(i) => i,
        Err(e) => {
            tracing::warn!(plugin = %plugin.name, error = %e, "cannot list instances");
            return None;
        }
    };
    let claims = ctx.cluster.node_claims.state();
    Some(compare(
        instances,
        &claims,
        &plugin.metadata.provider_id_schemes,
        suspects,
        seen,
        jiff::Timestamp::now(),
    ))
}

/// One plugin's instances against the stored NodeClaims. An instance is an
/// orphan when no NodeClaim has its name, it is not terminated, and it is
/// past [`INSTANCE_GRACE`] (or, with no creation time, was a suspect on the
/// previous pass); every instance without a NodeClaim goes into `seen`.
fn compare(
    instances: Vec<wit::Instance>,
    claims: &[Arc<NodeClaim>],
    schemes: &[String],
    suspects: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    now: jiff::Timestamp,
) -> Survey {
    let names: BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let launched: Vec<&Arc<NodeClaim>> = claims
        .iter()
        .filter(|c| {
            c.provider_id().is_some_and(|id| {
                schemes.iter().any(|s| {
                    id.strip_prefix(s.as_str())
                        .is_some_and(|rest| rest.starts_with("://"))
                }) && c.metadata.deletion_timestamp.is_none()
            })
        })
        .collect();
    let unlisted = {
        let live: BTreeSet<&str> = instances.iter().map(|i| i.provider_id.as_str()).collect();
        launched
            .iter()
            .filter(|c| c.provider_id().is_some_and(|id| !live.contains(id)))
            .map(|c| (*c).clone())
            .collect()
    };
    let (listed, launched) = (instances.len(), launched.len());
    let mut orphans = Vec::new();
    for i in instances {
        if names.contains(i.node_claim.as_str())
            || matches!(i.state, wit::InstanceState::Terminated)
        {
            continue;
        }
        let old_enough = match i
            .created_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        {
            Some(t) => (now - t)
                .total(jiff::Unit::Second)
                .is_ok_and(|s| s >= INSTANCE_GRACE.as_secs_f64()),
            None => suspects.contains(&i.provider_id),
        };
        seen.insert(i.provider_id.clone());
        if old_enough {
            orphans.push(i);
        }
    }
    Survey {
        orphans,
        unlisted,
        listed,
        launched,
    }
}

/// The NodeClaim an orphaned instance was launched for, rebuilt from what
/// the cloud reports, for the plugin's delete.
fn orphan(i: &wit::Instance, meta: &wit::ProviderMetadata) -> wit::NodeClaim {
    let class = meta.node_classes.first();
    let mut claim = wit::NodeClaim {
        name: i.node_claim.clone(),
        node_pool: i.node_pool.clone(),
        labels: i.labels.clone(),
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![],
        resource_requests: vec![],
        node_class_ref: wit::NodeClassRef {
            group: class.map(|k| k.group.clone()).unwrap_or_default(),
            kind: class.map(|k| k.kind.clone()).unwrap_or_default(),
            name: String::new(),
        },
        provider_id: Some(i.provider_id.clone()),
        image_id: Some(i.image_id.clone()),
        kubelet_version: None,
    };
    claim.requirements.push(records::requirement_in(
        vocabulary::labels::INSTANCE_TYPE,
        &[&i.instance_type],
    ));
    claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn instance(claim: &str, id: &str, created: Option<&str>) -> wit::Instance {
        wit::Instance {
            node_claim: claim.into(),
            node_pool: "default".into(),
            provider_id: id.into(),
            image_id: String::new(),
            instance_type: "m-2".into(),
            zone: "z-1".into(),
            capacity_type: "on-demand".into(),
            state: wit::InstanceState::Running,
            labels: vec![],
            capacity: vec![],
            allocatable: vec![],
            created_at: created.map(str::to_string),
        }
    }

    fn at(t: &str) -> jiff::Timestamp {
        t.parse().expect("timestamp")
    }

    #[test]
    fn an_instance_is_an_orphan_only_without_a_claim_and_past_its_grace() {
        let claims = [fixtures::claim("owned").claim()];
        let now = at("2026-01-01T00:10:00Z");
        let mut terminated = instance("done", "test://done", Some("2026-01-01T00:00:00Z"));
        terminated.state = wit::InstanceState::Terminated;
        let instances = vec![
            instance("owned", "test://owned", Some("2026-01-01T00:00:00Z")),
            instance("leaked", "test://leaked", Some("2026-01-01T00:00:00Z")),
            instance(
                "launching",
                "test://launching",
                Some("2026-01-01T00:09:45Z"),
            ),
            terminated,
        ];
        let mut seen = BTreeSet::new();
        let s = compare(
            instances,
            &claims,
            &["test".into()],
            &BTreeSet::new(),
            &mut seen,
            now,
        );
        let orphans: Vec<&str> = s.orphans.iter().map(|i| i.node_claim.as_str()).collect();
        assert_eq!(orphans, ["leaked"]);
        assert!(
            seen.contains("test://launching"),
            "looked at again next pass"
        );
        assert!(!seen.contains("test://owned"));
    }

    #[test]
    fn an_instance_without_a_creation_time_is_an_orphan_when_seen_twice() {
        let now = at("2026-01-01T00:10:00Z");
        let list = || vec![instance("leaked", "test://leaked", None)];
        let mut suspects = BTreeSet::new();
        let first = compare(
            list(),
            &[],
            &["test".into()],
            &BTreeSet::new(),
            &mut suspects,
            now,
        );
        assert!(first.orphans.is_empty(), "first sighting");
        let mut seen = BTreeSet::new();
        let second = compare(list(), &[], &["test".into()], &suspects, &mut seen, now);
        assert_eq!(second.orphans.len(), 1);
    }

    #[test]
    fn only_this_plugins_live_claims_can_have_lost_their_instance() {
        let claims = [
            fixtures::claim("listed").claim(),
            fixtures::claim("lost").claim(),
            fixtures::claim("deleting").deleting().claim(),
            fixtures::claim("launching").no_provider_id().claim(),
            fixtures::claim("other").claim(),
        ];
        let mut claims = claims.to_vec();
        let other: NodeClaim = {
            let mut c = (*claims[4]).clone();
            if let Some(s) = c.status.as_mut() {
                s.provider_id = Some("testing://other".into());
            }
            c
        };
        claims[4] = Arc::new(other);
        let instances = vec![instance("listed", "test://listed", None)];
        let s = compare(
            instances,
            &claims,
            &["test".into()],
            &BTreeSet::new(),
            &mut BTreeSet::new(),
            at("2026-01-01T00:10:00Z"),
        );
        let unlisted: Vec<String> = s.unlisted.iter().map(|c| c.name_any()).collect();
        assert_eq!(
            unlisted,
            ["lost"],
            "a scheme that only starts like ours is another's"
        );
        assert_eq!((s.listed, s.launched), (1, 2));
    }

    #[test]
    fn a_plugin_that_lists_nothing_loses_one_node_claim_a_pass() {
        // It lists nothing while a hundred NodeClaims say it launched.
        assert_eq!(gone_deletions_bound(0, 100), 1);
        // A single instance that vanished is still cleaned up at once.
        assert_eq!(gone_deletions_bound(0, 1), 1);
        // It sees its cloud: every confirmed loss is acted on.
        assert_eq!(gone_deletions_bound(3, 100), usize::MAX);
    }
}
