//! Reserved capacity as the contract describes it: a reservation is an
//! offering of capacity type `reserved` with what it has left and its id
//! as a further requirement (wit/README.md, "Reserved capacity").

use crate::bindings::karpenter::provider::types::{InstanceType, Offering, Operator, Requirement};
use crate::labels;

/// A launch into a reservation costs this fraction of the type's cheapest
/// on-demand price: the reservation is paid for whether used or not, and
/// the smaller reserved type stays the cheaper.
pub const PRICE_FACTOR: f64 = 1e-7;

/// Adds to `it` the offering of one reservation in `zone` with `left`
/// instances left (a full one is not available), identified by
/// `requirements`; the type's capacity-type and zone requirements widen to
/// take it.
pub fn add_reserved_offering(
    it: &mut InstanceType,
    zone: &str,
    left: u32,
    requirements: Vec<Requirement>,
) {
    let on_demand = it
        .offerings
        .iter()
        .filter(|o| o.capacity_type == labels::ON_DEMAND)
        .map(|o| o.price)
        .fold(f64::INFINITY, f64::min);
    it.offerings.push(Offering {
        zone: zone.to_string(),
        capacity_type: labels::RESERVED.into(),
        price: if on_demand.is_finite() {
            on_demand * PRICE_FACTOR
        } else {
            0.0
        },
        available: left > 0,
        reservation_capacity: Some(left),
        requirements,
    });
    for req in &mut it.requirements {
        let value = if req.key == labels::CAPACITY_TYPE {
            labels::RESERVED
        } else if req.key == labels::ZONE {
            zone
        } else {
            continue;
        };
        if req.operator == Operator::In && !req.values.iter().any(|v| v == value) {
            req.values.push(value.into());
        }
    }
}
