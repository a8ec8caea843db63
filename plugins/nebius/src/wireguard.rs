//! WireGuard node addresses: the range, the free-address choice, and a
//! reservation that concurrent launches cannot both win.
//!
//! Concurrent creates run in separate plugin instances that share only the
//! host cache, which offers get/set/delete/keys but no compare-and-set. Two
//! launches therefore reserve by "write, then look": each writes its own key
//! `wg/<address>/<nodeclaim>` and then lists `wg/<address>/`. It keeps the
//! address only if its key is the only one; otherwise it withdraws its key
//! and tries another address after a short jittered pause. In a linearizable
//! store (the host's cache is one mutex-guarded map) two launches cannot
//! both see themselves alone: whichever wrote second lists after both writes
//! and sees the other. At worst both withdraw and retry elsewhere.
//!
//! Addresses in use are the union of every Node's InternalIP (cluster view),
//! the address label of every instance the project holds (what survives a
//! controller restart) and live reservations in the cache (launches still in
//! flight). A reservation outlives the launch by far (an hour) and is
//! dropped when the NodeClaim is deleted.

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv4Addr;

pub const PREFIX: &str = "wg/";
pub const RESERVATION_TTL_SECONDS: u64 = 3600;
const MAX_ATTEMPTS: u32 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not address/prefix"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("{ip:?} is not an IPv4 address"))?;
        let prefix: u8 = len
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| format!("prefix {len:?} is not 0..32"))?;
        let mask = mask(prefix);
        Ok(Cidr {
            base: u32::from(ip) & mask,
            prefix,
        })
    }

    /// Host addresses, without the network and broadcast addresses.
    pub fn usable(&self) -> u64 {
        if self.prefix >= 31 {
            0
        } else {
            (1u64 << (32 - self.prefix)) - 2
        }
    }

    /// The `i`-th usable address (0-based).
    pub fn nth(&self, i: u64) -> Option<Ipv4Addr> {
        (i < self.usable()).then(|| Ipv4Addr::from(self.base + 1 + i as u32))
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == self.base
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

/// FNV-1a: a stable spread of starting points, so concurrent launches start
/// their search in different places.
pub fn spread(name: &str, attempt: u32) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes().chain(attempt.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// A free address, searching from `start` onwards and wrapping around.
pub fn free(cidr: &Cidr, taken: &HashSet<Ipv4Addr>, start: u64) -> Option<Ipv4Addr> {
    let n = cidr.usable();
    if n == 0 {
        return None;
    }
    // Only addresses inside the range can block it: when they cover it all,
    // say so without walking a large range.
    let inside = taken.iter().filter(|ip| cidr.contains(**ip)).count() as u64;
    if inside >= n {
        return None;
    }
    (0..n)
        .map(|k| (start + k) % n)
        .filter_map(|i| cidr.nth(i))
        .find(|ip| !taken.contains(ip))
}

/// The reservation keys' parts: `wg/<address>/<nodeclaim>`.
pub fn parse_key(key: &str) -> Option<(Ipv4Addr, &str)> {
    let rest = key.strip_prefix(PREFIX)?;
    let (ip, claim) = rest.split_once('/')?;
    Some((ip.parse().ok()?, claim))
}

pub fn key(ip: Ipv4Addr, claim: &str) -> String {
    format!("{PREFIX}{ip}/{claim}")
}

/// What the reservation needs from the host: the shared cache and a pause.
pub trait Store {
    fn keys(&self, prefix: &str) -> Vec<String>;
    fn set(&self, key: &str, ttl_seconds: u64);
    fn delete(&self, key: &str);
    fn pause(&self, millis: u64);
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReserveError {
    /// Every address of the range is in use.
    Exhausted { cidr: Cidr, in_use: usize },
    /// Lost the race for an address too many times in a row.
    Contended { attempts: u32 },
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReserveError::Exhausted { cidr, in_use } => write!(
                f,
                "no free WireGuard address in wireguardPeerCIDR {cidr}: all {} usable addresses are taken ({in_use} in use by Nodes, instances and launches in flight)",
                cidr.usable()
            ),
            ReserveError::Contended { attempts } => write!(
                f,
                "lost the race for a WireGuard address {attempts} times in a row"
            ),
        }
    }
}

/// Reserve an address for `claim`; `in_use` are the addresses of Nodes and
/// instances. A claim that already holds a reservation gets it back.
pub fn reserve(
    store: &dyn Store,
    cidr: &Cidr,
    claim: &str,
    in_use: &HashSet<Ipv4Addr>,
) -> Result<Ipv4Addr, ReserveError> {
    if let Some(ip) = held(store, claim) {
        return Ok(ip);
    }
    let mut lost = HashSet::new();
    for attempt in 0..MAX_ATTEMPTS {
        let mut taken: HashSet<Ipv4Addr> = in_use.clone();
        taken.extend(
            store
                .keys(PREFIX)
                .iter()
                .filter_map(|k| parse_key(k))
                .map(|(ip, _)| ip),
        );
        let reserved_elsewhere = taken.len();
        taken.extend(lost.iter().copied());
        let Some(ip) = free(cidr, &taken, spread(claim, attempt)) else {
            if lost.is_empty() {
                return Err(ReserveError::Exhausted {
                    cidr: *cidr,
                    in_use: reserved_elsewhere,
                });
            }
            // Only addresses we lost races for were left: they may be free
            // again once their other claimant withdrew.
            lost.clear();
            store.pause(5 + spread(claim, attempt) % 20);
            continue;
        };
        let mine = key(ip, claim);
        store.set(&mine, RESERVATION_TTL_SECONDS);
        let holders = store.keys(&format!("{PREFIX}{ip}/"));
        if holders.len() == 1 && holders[0] == mine {
            return Ok(ip);
        }
        store.delete(&mine);
        lost.insert(ip);
        store.pause(1 + spread(claim, attempt + 1000) % 10);
    }
    Err(ReserveError::Contended {
        attempts: MAX_ATTEMPTS,
    })
}

/// The address `claim` already holds, if any.
pub fn held(store: &dyn Store, claim: &str) -> Option<Ipv4Addr> {
    store
        .keys(PREFIX)
        .iter()
        .filter_map(|k| parse_key(k))
        .find(|(_, c)| *c == claim)
        .map(|(ip, _)| ip)
}

/// Drop `claim`'s reservations.
pub fn release(store: &dyn Store, claim: &str) {
    for k in store.keys(PREFIX) {
        if parse_key(&k).is_some_and(|(_, c)| c == claim) {
            store.delete(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::{Arc, Barrier, Mutex};

    /// The host cache's semantics: one mutex-guarded sorted map.
    #[derive(Default)]
    struct Map(Mutex<BTreeMap<String, ()>>);

    impl Store for Map {
        fn keys(&self, prefix: &str) -> Vec<String> {
            let m = self.0.lock().expect("lock");
            m.keys()
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect()
        }
        fn set(&self, key: &str, _ttl: u64) {
            self.0.lock().expect("lock").insert(key.into(), ());
        }
        fn delete(&self, key: &str) {
            self.0.lock().expect("lock").remove(key);
        }
        fn pause(&self, millis: u64) {
            std::thread::sleep(std::time::Duration::from_millis(millis));
        }
    }

    #[test]
    fn ranges() {
        let c = Cidr::parse("100.96.1.7/24").expect("cidr");
        assert_eq!(c.to_string(), "100.96.1.0/24");
        assert_eq!(c.usable(), 254);
        assert_eq!(c.nth(0), Some(Ipv4Addr::new(100, 96, 1, 1)));
        assert_eq!(c.nth(253), Some(Ipv4Addr::new(100, 96, 1, 254)));
        assert_eq!(c.nth(254), None);
        assert_eq!(Cidr::parse("10.0.0.0/31").expect("cidr").usable(), 0);
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("10.0.0/8").is_err());
    }

    #[test]
    fn free_skips_taken_and_reports_exhaustion() {
        let c = Cidr::parse("10.0.0.0/30").expect("cidr"); // .1 and .2
        let mut taken = HashSet::from([Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(9, 9, 9, 9)]);
        assert_eq!(free(&c, &taken, 0), Some(Ipv4Addr::new(10, 0, 0, 2)));
        taken.insert(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(free(&c, &taken, 7), None);
    }

    /// 50 launches at once over a range with room for 60: 50 distinct
    /// addresses, none in use already; then the range runs out.
    #[test]
    fn concurrent_reservations_never_collide() {
        let store = Arc::new(Map::default());
        let cidr = Cidr::parse("100.96.0.0/26").expect("cidr"); // 62 usable
        let in_use: HashSet<Ipv4Addr> = [1u8, 2].map(|i| Ipv4Addr::new(100, 96, 0, i)).into();
        let barrier = Arc::new(Barrier::new(50));
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let (store, barrier, in_use) = (store.clone(), barrier.clone(), in_use.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    reserve(&*store, &cidr, &format!("pool-{i}"), &in_use)
                })
            })
            .collect();
        let got: Vec<Ipv4Addr> = handles
            .into_iter()
            .map(|h| h.join().expect("thread").expect("reserved"))
            .collect();
        let distinct: HashSet<_> = got.iter().collect();
        assert_eq!(distinct.len(), 50);
        assert!(
            got.iter()
                .all(|ip| !in_use.contains(ip) && cidr.contains(*ip))
        );
        // A retried create gets its address back.
        assert_eq!(reserve(&*store, &cidr, "pool-7", &in_use), Ok(got[7]));
        for i in 50..60 {
            reserve(&*store, &cidr, &format!("pool-{i}"), &in_use).expect("room left");
        }
        let err = reserve(&*store, &cidr, "pool-60", &in_use).expect_err("exhausted");
        assert!(
            err.to_string().contains("no free WireGuard address"),
            "{err}"
        );
        release(&*store, "pool-3");
        assert_eq!(reserve(&*store, &cidr, "pool-60", &in_use), Ok(got[3]));
    }
}
