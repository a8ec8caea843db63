//! Offerings that recently failed to launch. The provisioner treats them as
//! unavailable until they expire, so the next batch picks another zone, size
//! or capacity type instead of failing the same way again.

use crate::plugins::wit;
use std::collections::HashMap;
use std::sync::Mutex;
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
    pub fn apply(&self, types: &mut [engine::InstanceType], now: Instant) -> usize {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if until.is_empty() {
            return 0;
        }
        let mut n = 0;
        for t in types.iter_mut() {
            for o in &mut t.offerings {
                let key = (
                    t.name.clone(),
                    o.zone.clone().unwrap_or_default(),
                    o.capacity_type.clone(),
                );
                if o.available && until.get(&key).is_some_and(|t| *t > now) {
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
        let types = || {
            vec![engine::InstanceType {
                name: "m".into(),
                offerings: vec![offering("a"), offering("b")],
                ..Default::default()
            }]
        };
        let mut t = types();
        assert_eq!(cache.apply(&mut t, now + Duration::from_secs(1)), 1);
        assert!(!t[0].offerings[0].available);
        assert!(t[0].offerings[1].available, "another zone is untouched");
        let mut t = types();
        assert_eq!(cache.apply(&mut t, now + TTL + Duration::from_secs(1)), 0);
    }
}
