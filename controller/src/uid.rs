//! Object UIDs as numbers: sets keyed by them hold 16 bytes an entry rather
//! than a 36-byte string and its allocation.

/// A UID (a UUID) as the number it spells. Anything else (the API server
/// makes only UUIDs) is hashed to 128 bits, where a collision is as unlikely
/// as between two UUIDs.
pub fn key(uid: &str) -> u128 {
    let hashed = || {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let half = |salt: u8| {
            let mut h = DefaultHasher::new();
            (salt, uid).hash(&mut h);
            u128::from(h.finish())
        };
        half(0) << 64 | half(1)
    };
    let (mut n, mut digits) = (0u128, 0);
    for c in uid.chars().filter(|c| *c != '-') {
        match c.to_digit(16) {
            Some(d) if digits < 32 => (n, digits) = (n << 4 | u128::from(d), digits + 1),
            _ => return hashed(),
        }
    }
    if digits == 32 { n } else { hashed() }
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn a_uid_is_kept_as_the_number_it_spells() {
        assert_eq!(
            key("5f0c7e0e-0000-4000-8000-00000000002a"),
            0x5f0c7e0e_0000_4000_8000_00000000002a
        );
        assert_ne!(key("not-a-uuid"), key("not-a-uuid-either"));
        assert_eq!(key("not-a-uuid"), key("not-a-uuid"));
    }
}
