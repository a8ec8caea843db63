//! Offerings that recently failed to launch. The provisioner treats them as
//! unavailable until they expire, so the next batch picks another zone, size
//! or capacity type instead of failing the same way again.

use karpenter_runtime::wit;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Karpenter's default: an insufficient-capacity answer holds for 3 minutes.
pub const TTL: Duration = Duration::from_secs(180);

#[derive(Default)]
pub struct UnavailableOfferings {
    until: Mutex<HashMap<(String, String, String), Instant>>,
}

impl UnavailableOfferings {
    pub fn mark(&self, offerings: &[wit::OfferingRef], now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.retain(|_, t| *t > now);
        for o in offerings {
            until.insert(
                (
                    o.instance_type.clone(),
                    o.zone.clone(),
                    o.capacity_type.clone(),
                ),
                now + TTL,
            );
        }
    }

    /// Marks the matching offerings of `types` unavailable; returns how many.
    /// The catalog is shared with the cache, so it is copied only when an
    /// offering is marked.
    pub fn apply(&self, types: &mut Arc<[engine::InstanceType]>, now: Instant) -> usize {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        let failed: Vec<&(String, String, String)> = until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(k, _)| k)
            .collect();
        if failed.is_empty() {
            return 0;
        }
        let hit = |name: &str, o: &engine::Offering| {
            o.available
                && failed.iter().any(|(it, zone, ct)| {
                    it == name
                        && o.zone.as_deref().unwrap_or_default() == zone
                        && &o.capacity_type == ct
                })
        };
        if !types
            .iter()
            .any(|t| t.offerings.iter().any(|o| hit(&t.name, o)))
        {
            return 0;
        }
        let mut n = 0;
        for t in Arc::make_mut(types) {
            for o in &mut t.offerings {
                if hit(&t.name, o) {
                    o.available = false;
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(zone: &str) -> engine::Offering {
        engine::Offering {
            zone: Some(zone.into()),
            capacity_type: "on-demand".into(),
            price: 1.0,
            available: true,
            reservation_capacity: None,
            requirements: vec![],
            price_overlay: None,
        }
    }

    #[test]
    fn a_failed_offering_is_unavailable_until_it_expires() {
        let cache = UnavailableOfferings::default();
        let now = Instant::now();
        cache.mark(
            &[wit::OfferingRef {
                instance_type: "m".into(),
                zone: "a".into(),
                capacity_type: "on-demand".into(),
            }],
            now,
        );
        let catalog: Arc<[engine::InstanceType]> = Arc::new([engine::InstanceType {
            name: "m".into(),
            offerings: vec![offering("a"), offering("b")],
            ..Default::default()
        }]);
        let mut t = catalog.clone();
        assert_eq!(cache.apply(&mut t, now + Duration::from_secs(1)), 1);
        assert!(!t[0].offerings[0].available);
        assert!(t[0].offerings[1].available, "another zone is untouched");
        assert!(
            catalog[0].offerings[0].available,
            "the shared catalog is untouched"
        );
        let mut t = catalog.clone();
        assert_eq!(cache.apply(&mut t, now + TTL + Duration::from_secs(1)), 0);
        assert!(Arc::ptr_eq(&t, &catalog), "nothing marked, nothing copied");
    }
}
