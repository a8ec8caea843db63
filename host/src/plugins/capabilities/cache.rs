//! `karpenter:provider/cache`: a key-value cache with TTLs, one per plugin
//! name, shared by all its instances and kept across hot reloads.

use crate::plugins::bindings::v0_1_0::karpenter::provider::cache::Host;
use crate::plugins::state::State;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bounds what one plugin can pin in host memory.
const MAX_ENTRIES: usize = 100_000;
const MAX_VALUE_BYTES: usize = 1 << 20;

/// A value and when it expires (never, for None).
type Entry = (Vec<u8>, Option<Instant>);

#[derive(Default)]
pub struct KvCache {
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl KvCache {
    pub fn get(&self, key: &str, now: Instant) -> Option<Vec<u8>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, exp)| exp.is_none_or(|e| e > now))
            .map(|(v, _)| v.clone())
    }

    pub fn set(&self, key: String, value: Vec<u8>, ttl: Duration, now: Instant) -> bool {
        if value.len() > MAX_VALUE_BYTES {
            return false;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            entries.retain(|_, (_, exp)| exp.is_none_or(|e| e > now));
            if entries.len() >= MAX_ENTRIES {
                return false;
            }
        }
        let expiry = (!ttl.is_zero()).then(|| now + ttl);
        entries.insert(key, (value, expiry));
        true
    }

    pub fn delete(&self, key: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub fn keys(&self, prefix: &str, now: Instant) -> Vec<String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(_, (_, exp))| exp.is_none_or(|e| e > now))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl Host for State {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.caps.cache.get(&key, Instant::now())
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_seconds: u64) {
        if !self.caps.cache.set(
            key.clone(),
            value,
            Duration::from_secs(ttl_seconds),
            Instant::now(),
        ) {
            tracing::warn!(plugin = %self.caps.plugin, key, "cache entry refused: over the plugin's cache limits");
        }
    }

    async fn delete(&mut self, key: String) {
        self.caps.cache.delete(&key)
    }

    async fn keys(&mut self, prefix: String) -> Vec<String> {
        self.caps.cache.keys(&prefix, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_keys_are_listed_by_prefix() {
        let cache = KvCache::default();
        let t0 = Instant::now();
        cache.set(
            "unavailable/a/z1/spot".into(),
            vec![],
            Duration::from_secs(60),
            t0,
        );
        cache.set(
            "unavailable/b/z1/spot".into(),
            vec![],
            Duration::from_secs(10),
            t0,
        );
        cache.set("other".into(), b"x".to_vec(), Duration::ZERO, t0);
        assert_eq!(cache.keys("unavailable/", t0).len(), 2);
        let later = t0 + Duration::from_secs(30);
        assert_eq!(
            cache.keys("unavailable/", later),
            vec!["unavailable/a/z1/spot".to_string()]
        );
        assert_eq!(
            cache.get("other", later + Duration::from_secs(1_000_000)),
            Some(b"x".to_vec())
        );
        cache.delete("other");
        assert_eq!(cache.get("other", later), None);
    }
}
