//! Capacity reservations, as a cloud's capacity reservation (an ODCR, an
//! Azure capacity reservation group) looks to Karpenter: so many instances of
//! one type in one zone, offered as `karpenter.sh/capacity-type: reserved`
//! with the reservation's id as a further requirement.
//!
//! The setting `RESERVATIONS` lists them, comma separated, as
//! `id=instance-type/zone/count`. What is left of each is its count less the
//! Nodes this provider made in it, counted afresh on every call: the host
//! counts its own NodeClaims not yet launched.

use crate::nodes;
use karpenter_plugin_sdk::prelude::*;

pub const LABEL_RESERVATION_ID: &str = "karpenter.kwok.sh/reservation-id";

#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub count: u32,
}

pub fn parse(setting: &str) -> Result<Vec<Reservation>, String> {
    setting
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let bad = || format!("RESERVATIONS: {item:?} is not id=instance-type/zone/count");
            let (id, rest) = item.split_once('=').ok_or_else(bad)?;
            let mut parts = rest.split('/');
            let (Some(instance_type), Some(zone), Some(count), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let count = count.parse().map_err(|_| bad())?;
            if id.is_empty() || instance_type.is_empty() || zone.is_empty() {
                return Err(bad());
            }
            Ok(Reservation {
                id: id.into(),
                instance_type: instance_type.into(),
                zone: zone.into(),
                count,
            })
        })
        .collect()
}

/// The reservations the setting names, parsed once per instance.
pub fn configured() -> Result<&'static [Reservation], Error> {
    static PARSED: std::sync::OnceLock<Result<Vec<Reservation>, String>> =
        std::sync::OnceLock::new();
    PARSED
        .get_or_init(|| parse(&config::get_setting("RESERVATIONS").unwrap_or_default()))
        .as_deref()
        .map_err(|e| fatal(e.clone()))
}

/// Instances each reservation has left: its count less this provider's
/// Nodes in it.
pub fn left(all: &[Reservation]) -> Result<Vec<u32>, Error> {
    if all.is_empty() {
        return Ok(Vec::new());
    }
    let taken = nodes::list_selected(Some(LABEL_RESERVATION_ID))?;
    Ok(all
        .iter()
        .map(|r| {
            let used = taken
                .iter()
                .filter(|i| {
                    i.labels
                        .iter()
                        .any(|(k, v)| k == LABEL_RESERVATION_ID && *v == r.id)
                })
                .count();
            r.count.saturating_sub(used as u32)
        })
        .collect())
}

/// Adds to `it` the offering of each reservation of its type, with what the
/// reservation has left (`left`, in the order of `all`). A full one is not
/// available: nothing can launch into it.
pub fn add_offerings(it: &mut InstanceType, all: &[Reservation], left: &[u32]) {
    for (r, left) in all.iter().zip(left) {
        if r.instance_type != it.name {
            continue;
        }
        add_reserved_offering(
            it,
            &r.zone,
            *left,
            vec![req_in(LABEL_RESERVATION_ID, &[&r.id])],
        );
    }
}

/// Whether reservation `id` holds more Nodes than its count: two launches
/// raced for its last instance. A cloud refuses the second; so does this.
pub fn oversubscribed(id: &str) -> Result<bool, Error> {
    let Some(r) = configured()?.iter().find(|r| r.id == id) else {
        return Ok(false);
    };
    let held = nodes::list_selected(Some(&format!("{LABEL_RESERVATION_ID}={id}")))?;
    Ok(held.len() > r.count as usize)
}

/// The reservation an offering draws on, by its id requirement.
pub fn of(offering: &Offering) -> Option<&str> {
    offering
        .requirements
        .iter()
        .find(|r| r.key == LABEL_RESERVATION_ID)
        .and_then(|r| r.values.first())
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_names_each_reservation() {
        let parsed =
            parse("r-1=c-2x-amd64-linux/test-zone-a/2, r-2=m-4x-arm64-linux/test-zone-b/0")
                .expect("valid");
        assert_eq!(
            parsed[0],
            Reservation {
                id: "r-1".into(),
                instance_type: "c-2x-amd64-linux".into(),
                zone: "test-zone-a".into(),
                count: 2,
            }
        );
        assert_eq!(parsed[1].count, 0);
        assert!(parse("").expect("empty").is_empty());
        for bad in ["r-1", "r-1=t/z", "r-1=t/z/x", "=t/z/1", "r=t/z/1/2"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_reservation_becomes_a_reserved_offering_of_its_type() {
        let mut it = crate::catalog::instance_type(
            &crate::catalog::find("c-2x-amd64-linux").expect("in catalog"),
        );
        let all =
            parse("r-1=c-2x-amd64-linux/test-zone-a/2,r-9=nope/test-zone-a/1").expect("valid");
        add_offerings(&mut it, &all, &[1, 1]);
        let reserved: Vec<&Offering> = it
            .offerings
            .iter()
            .filter(|o| o.capacity_type == labels::RESERVED)
            .collect();
        assert_eq!(reserved.len(), 1);
        assert_eq!(reserved[0].reservation_capacity, Some(1));
        assert!(reserved[0].available);
        assert_eq!(of(reserved[0]), Some("r-1"));
        assert!(reserved[0].price > 0.0 && reserved[0].price < 1e-6);
        let cts = &it
            .requirements
            .iter()
            .find(|r| r.key == labels::CAPACITY_TYPE)
            .expect("capacity type")
            .values;
        assert!(cts.iter().any(|v| v == labels::RESERVED), "{cts:?}");

        let mut full = crate::catalog::instance_type(
            &crate::catalog::find("c-2x-amd64-linux").expect("in catalog"),
        );
        add_offerings(&mut full, &all, &[0, 0]);
        let reserved = full
            .offerings
            .iter()
            .find(|o| o.capacity_type == labels::RESERVED);
        assert!(reserved.is_some_and(|o| !o.available && o.reservation_capacity == Some(0)));
    }
}
