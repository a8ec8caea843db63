//! Instance types per NodePool, asked of its plugin and kept for a short
//! while: the catalog changes rarely, while batches come every few seconds.
//! A change to the NodePool or its NodeClass asks again at once. They are
//! kept as the engine reads them, converted once: every batch and
//! disruption pass shares this copy.
//!
//! A plugin gets a deadline to answer; one that misses it, or fails, is
//! answered for by its last good catalog for the same NodePool and
//! NodeClass, if one is at most [`STALE_LIMIT`] old, so one slow cloud
//! neither stalls the provisioner nor empties its NodePools.

use crate::crds::NodePool;
use crate::records;
use crate::snapshot::instance_types::catalog;
use anyhow::Context;
use karpenter_runtime::{Plugin, wit};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TTL: Duration = Duration::from_secs(60);
/// How long a plugin may take to list instance types.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// How old a catalog may be and still stand in for one a plugin failed to give.
pub const STALE_LIMIT: Duration = Duration::from_secs(60 * 60);

pub struct InstanceTypeCache {
    entries: Mutex<Entries>,
    ttl: Duration,
    deadline: Duration,
}

impl Default for InstanceTypeCache {
    fn default() -> Self {
        Self::new(TTL, DEADLINE)
    }
}

/// NodePool uid and generation, NodeClass uid and generation, plugin digest.
type Key = (String, i64, String, u64, String);
type Entries = HashMap<Key, (Instant, Arc<[engine::InstanceType]>)>;

impl InstanceTypeCache {
    pub fn new(ttl: Duration, deadline: Duration) -> Self {
        InstanceTypeCache {
            entries: Mutex::default(),
            ttl,
            deadline,
        }
    }

    pub async fn get(
        &self,
        plugin: &Plugin,
        pool: &NodePool,
        class: &wit::NodeClass,
        class_uid: &str,
    ) -> anyhow::Result<Arc<[engine::InstanceType]>> {
        let key = (
            pool.metadata.uid.clone().unwrap_or_default(),
            pool.metadata.generation.unwrap_or_default(),
            class_uid.to_string(),
            class.generation,
            plugin.sha256.clone(),
        );
        let now = Instant::now();
        if let Some((at, types)) = self.lock().get(&key)
            && now.duration_since(*at) < self.ttl
        {
            return Ok(types.clone());
        }
        let wit_pool = records::node_pool(pool)?;
        let asked = plugin.get_instance_types(&wit_pool, class);
        let fetched = match tokio::time::timeout(self.deadline, asked).await {
            Ok(answer) => answer.map_err(anyhow::Error::from).and_then(|types| {
                catalog(types).with_context(|| format!("plugin {}", plugin.name))
            }),
            Err(_) => Err(anyhow::anyhow!(
                "plugin {} did not list instance types within {:?}",
                plugin.name,
                self.deadline
            )),
        };
        let mut entries = self.lock();
        let types = match fetched {
            // NodePools of one NodeClass are mostly given the same catalog:
            // they share one copy of it.
            Ok(types) => entries
                .values()
                .map(|(_, kept)| kept)
                .find(|kept| kept[..] == types[..])
                .cloned()
                .unwrap_or(types),
            Err(e) => {
                let Some((at, last)) = entries
                    .get(&key)
                    .filter(|(at, _)| now.duration_since(*at) < STALE_LIMIT)
                else {
                    return Err(e);
                };
                tracing::warn!(plugin = %plugin.name, error = format!("{e:#}"), age_seconds = now.duration_since(*at).as_secs(), "using the last instance types the plugin listed");
                return Ok(last.clone());
            }
        };
        entries.retain(|_, (at, _)| now.duration_since(*at) < STALE_LIMIT);
        entries.insert(key, (now, types.clone()));
        Ok(types)
    }

    /// Asks every plugin afresh at the next use, keeping the catalogs as
    /// stand-ins should they fail: a launch into a reservation, or its
    /// release, changes how many instances the reservation has left.
    pub fn expire(&self) {
        let now = Instant::now();
        let old = now.checked_sub(self.ttl).unwrap_or(now);
        for (at, _) in self.lock().values_mut() {
            *at = (*at).min(old);
        }
    }

    /// How long one plugin call may take to list instance types.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// The catalogs the NodePools were last given, stand-ins included.
    pub fn catalogs(&self) -> Vec<Arc<[engine::InstanceType]>> {
        self.lock()
            .values()
            .map(|(_, types)| types.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
