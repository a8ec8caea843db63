//! Instance types per NodePool, asked of its plugin and kept for a short
//! while: the catalog changes rarely, while batches come every few seconds.
//! A change to the NodePool or its NodeClass asks again at once. They are
//! kept as the engine reads them, converted once: every batch and
//! disruption pass shares this copy.

use crate::crds::NodePool;
use crate::plugins::{Plugin, objects, wit};
use crate::snapshot::instance_types::catalog;
use anyhow::Context;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TTL: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct InstanceTypeCache {
    entries: Mutex<Entries>,
}

/// NodePool uid and generation, NodeClass uid and generation, plugin digest.
type Key = (String, i64, String, u64, String);
type Entries = HashMap<Key, (Instant, Arc<[engine::InstanceType]>)>;

impl InstanceTypeCache {
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
            && now.duration_since(*at) < TTL
        {
            return Ok(types.clone());
        }
        let types = plugin
            .get_instance_types(&objects::node_pool(pool)?, class)
            .await?;
        let types = catalog(&types).with_context(|| format!("plugin {}", plugin.name))?;
        let mut entries = self.lock();
        entries.retain(|_, (at, _)| now.duration_since(*at) < TTL);
        entries.insert(key, (now, types.clone()));
        Ok(types)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
