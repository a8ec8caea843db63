//! `karpenter:provider/cache`: a key-value cache with TTLs, one per plugin
//! name, shared by all its instances and kept across hot reloads of the same
//! code and settings (a load with other code or settings gets a new one).
//! Every entry is reserved in the plugin's memory budget.

use crate::bindings::v0_1_4::karpenter::provider::cache::Host;
use crate::budget::{MemoryBudget, Use};
use crate::state::State;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One value larger than this is refused whatever the budget.
const MAX_VALUE_BYTES: usize = 1 << 20;
/// What an entry costs beyond its key and value: the map's node, the
/// strings' and vector's headers, the expiry.
const ENTRY_OVERHEAD: usize = 96;

/// A value and when it expires (never, for None).
type Entry = (Vec<u8>, Option<Instant>);

pub struct KvCache {
    entries: Mutex<BTreeMap<String, Entry>>,
    budget: Arc<MemoryBudget>,
}

fn cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl KvCache {
    pub fn new(budget: Arc<MemoryBudget>) -> Self {
        KvCache {
            entries: Mutex::new(BTreeMap::new()),
            budget,
        }
    }

    pub fn get(&self, key: &str, now: Instant) -> Option<Vec<u8>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(key)
            .filter(|(_, exp)| exp.is_none_or(|e| e > now))
            .map(|(v, _)| v.clone())
    }

    /// Stores the entry if the plugin's budget holds it, after dropping
    /// expired entries if it would not; the error says why not.
    pub fn set(
        &self,
        key: String,
        value: Vec<u8>,
        ttl: Duration,
        now: Instant,
    ) -> Result<(), String> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "a value of {} bytes is larger than the cache's {MAX_VALUE_BYTES}",
                value.len()
            ));
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let needed = cost(&key, &value);
        let replaced = entries.get(&key).map_or(0, |(v, _)| cost(&key, v));
        let grow = needed.saturating_sub(replaced);
        if self.budget.try_reserve(Use::Cache, grow).is_err() {
            self.drop_expired(&mut entries, now);
            self.budget
                .try_reserve(Use::Cache, grow)
                .map_err(|e| e.to_string())?;
        }
        self.budget
            .release(Use::Cache, replaced.saturating_sub(needed));
        let expiry = (!ttl.is_zero()).then(|| now + ttl);
        entries.insert(key, (value, expiry));
        Ok(())
    }

    fn drop_expired(&self, entries: &mut BTreeMap<String, Entry>, now: Instant) {
        entries.retain(|k, (v, exp)| {
            let live = exp.is_none_or(|e| e > now);
            if !live {
                self.budget.release(Use::Cache, cost(k, v));
            }
            live
        });
    }

    pub fn delete(&self, key: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, _)) = entries.remove(key) {
            self.budget.release(Use::Cache, cost(key, &v));
        }
    }

    /// Forgets everything, handing its room back to the budget.
    pub fn clear(&self) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for (k, (v, _)) in std::mem::take(&mut *entries) {
            self.budget.release(Use::Cache, cost(&k, &v));
        }
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

/// A load with other code or settings has a cache of its own; this one's
/// room goes back to the budget once its last load is gone.
impl Drop for KvCache {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Host for State {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.caps.cache.get(&key, Instant::now())
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_seconds: u64) {
        let stored = self.caps.cache.set(
            key.clone(),
            value,
            Duration::from_secs(ttl_seconds),
            Instant::now(),
        );
        if let Err(why) = stored {
            self.caps.log.warn_refused(&self.caps.plugin, &key, &why);
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

    fn cache(limit: usize) -> KvCache {
        KvCache::new(Arc::new(MemoryBudget::new("test", limit)))
    }

    #[test]
    fn entries_expire_and_keys_are_listed_by_prefix() {
        let cache = cache(1 << 20);
        let t0 = Instant::now();
        let ttl = Duration::from_secs;
        cache
            .set("unavailable/a/z1/spot".into(), vec![], ttl(60), t0)
            .expect("fits");
        cache
            .set("unavailable/b/z1/spot".into(), vec![], ttl(10), t0)
            .expect("fits");
        cache
            .set("other".into(), b"x".to_vec(), Duration::ZERO, t0)
            .expect("fits");
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

    #[test]
    fn the_budget_bounds_what_the_cache_holds_and_expired_entries_make_room() {
        let cache = cache(4 << 20);
        let t0 = Instant::now();
        let mib = vec![0u8; 1 << 20];
        let mut kept = 0;
        for i in 0..10 {
            if cache
                .set(format!("k{i}"), mib.clone(), Duration::from_secs(5), t0)
                .is_ok()
            {
                kept += 1;
            }
        }
        assert_eq!(kept, 3, "4 MiB hold three 1 MiB entries and their overhead");
        let err = cache
            .set("more".into(), mib.clone(), Duration::ZERO, t0)
            .expect_err("full");
        assert!(err.contains("over its memory budget of 4 MiB"), "{err}");
        // Replacing an entry with a smaller one frees the difference.
        cache
            .set("k0".into(), vec![1], Duration::ZERO, t0)
            .expect("smaller");
        cache
            .set("more".into(), mib.clone(), Duration::ZERO, t0)
            .expect("room again");
        // Once the others expire, their room is taken back.
        let later = t0 + Duration::from_secs(6);
        cache
            .set("late".into(), mib.clone(), Duration::ZERO, later)
            .expect("expired make room");
        cache.clear();
        assert!(cache.keys("", later).is_empty());
        assert_eq!(cache.budget.usage().total(), 0);
    }

    #[test]
    fn a_dropped_cache_hands_its_room_back() {
        let budget = Arc::new(MemoryBudget::new("test", 1 << 20));
        let cache = KvCache::new(budget.clone());
        cache
            .set("k".into(), vec![0; 1000], Duration::ZERO, Instant::now())
            .expect("fits");
        assert!(budget.usage().total() > 1000);
        drop(cache);
        assert_eq!(budget.usage().total(), 0);
    }
}
