//! Random faults for the cloud emulators: a share of the calls fails the way
//! a cloud fails under load. Each emulator maps a [`Kind`] to its own wire
//! (ARM's JSON errors, gRPC status codes); this crate only decides which
//! call fails and how, and counts what it injected.
//!
//! The sequence is a seeded xorshift: the same seed and the same order of
//! calls give the same faults.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How a call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Throttled, with a Retry-After (ARM 429, gRPC RESOURCE_EXHAUSTED).
    Throttled,
    /// The service failed (ARM 500, gRPC INTERNAL).
    Internal,
    /// The service is unavailable (ARM 503, gRPC UNAVAILABLE).
    Unavailable,
    /// A create cannot be placed: the cloud is out of capacity.
    Capacity,
    /// The call is carried out but its answer is lost: the client hears a
    /// gateway timeout (ARM 504, gRPC DEADLINE_EXCEEDED) after a delay.
    Timeout,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Throttled => "throttled",
            Kind::Internal => "internal",
            Kind::Unavailable => "unavailable",
            Kind::Capacity => "capacity",
            Kind::Timeout => "timeout",
        }
    }
}

/// Which calls fail: `rate` of them (0 to 1), kinds in turn drawn at random.
#[derive(Debug)]
pub struct Chaos {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    rate: f64,
    state: u64,
    calls: u64,
    injected: BTreeMap<Kind, u64>,
}

/// How long a lost answer keeps the client waiting.
pub const TIMEOUT_DELAY: Duration = Duration::from_secs(3);

impl Default for Chaos {
    fn default() -> Self {
        Chaos::new(0.0, 1)
    }
}

impl Chaos {
    pub fn new(rate: f64, seed: u64) -> Chaos {
        Chaos {
            inner: Mutex::new(Inner {
                rate: rate.clamp(0.0, 1.0),
                // xorshift has one fixed point: zero.
                state: seed.max(1),
                calls: 0,
                injected: BTreeMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the share of calls that fail from now on.
    pub fn set_rate(&self, rate: f64) {
        self.lock().rate = rate.clamp(0.0, 1.0);
    }

    /// Whether this call fails, and how. `create`: the call would place
    /// capacity, so it may also fail for lack of it.
    pub fn roll(&self, create: bool) -> Option<Kind> {
        let mut s = self.lock();
        s.calls += 1;
        if s.rate <= 0.0 {
            return None;
        }
        let draw = s.next();
        if (draw >> 11) as f64 / (1u64 << 53) as f64 >= s.rate {
            return None;
        }
        let kinds: &[Kind] = if create {
            &[
                Kind::Throttled,
                Kind::Internal,
                Kind::Unavailable,
                Kind::Capacity,
                Kind::Timeout,
            ]
        } else {
            &[
                Kind::Throttled,
                Kind::Internal,
                Kind::Unavailable,
                Kind::Timeout,
            ]
        };
        let kind = kinds[(s.next() % kinds.len() as u64) as usize];
        *s.injected.entry(kind).or_default() += 1;
        Some(kind)
    }

    /// Faults injected so far, by kind name, and the calls seen.
    pub fn report(&self) -> (BTreeMap<&'static str, u64>, u64) {
        let s = self.lock();
        (
            s.injected.iter().map(|(k, n)| (k.name(), *n)).collect(),
            s.calls,
        )
    }
}

impl Inner {
    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fails_about_the_rate_with_every_kind_and_repeats_per_seed() {
        let chaos = Chaos::new(0.3, 42);
        let seq: Vec<Option<Kind>> = (0..10_000).map(|i| chaos.roll(i % 2 == 0)).collect();
        let (injected, calls) = chaos.report();
        assert_eq!(calls, 10_000);
        let failed: u64 = injected.values().sum();
        assert!((2_700..3_300).contains(&failed), "{failed}");
        assert_eq!(injected.len(), 5, "{injected:?}");
        let again = Chaos::new(0.3, 42);
        let repeat: Vec<Option<Kind>> = (0..10_000).map(|i| again.roll(i % 2 == 0)).collect();
        assert_eq!(seq, repeat);
        // Capacity only fails calls that create.
        let reads = Chaos::new(1.0, 7);
        assert!((0..1_000).all(|_| reads.roll(false) != Some(Kind::Capacity)));
        let off = Chaos::new(0.0, 7);
        assert!((0..1_000).all(|_| off.roll(true).is_none()));
    }
}
