//! Evaluating a NodeClaim's requirements against an instance type, as every
//! provider must when it picks what to launch.

use crate::bindings::karpenter::provider::types::{
    InstanceType, NodeClaim, Offering, Operator, Requirement,
};
use crate::labels;

/// Whether `value` (None: the label is absent) satisfies one requirement.
pub fn satisfies(req: &Requirement, value: Option<&str>) -> bool {
    let number = |v: &str| v.parse::<i64>().ok();
    let bound = || req.values.first().and_then(|v| number(v));
    match req.operator {
        Operator::In => value.is_some_and(|v| req.values.iter().any(|x| x == v)),
        Operator::NotIn => value.is_none_or(|v| req.values.iter().all(|x| x != v)),
        Operator::Exists => value.is_some(),
        Operator::DoesNotExist => value.is_none(),
        Operator::Gt => cmp(value.and_then(number), bound(), |a, b| a > b),
        Operator::Lt => cmp(value.and_then(number), bound(), |a, b| a < b),
        Operator::Gte => cmp(value.and_then(number), bound(), |a, b| a >= b),
        Operator::Lte => cmp(value.and_then(number), bound(), |a, b| a <= b),
    }
}

fn cmp(a: Option<i64>, b: Option<i64>, f: impl Fn(i64, i64) -> bool) -> bool {
    matches!((a, b), (Some(a), Some(b)) if f(a, b))
}

/// Whether every requirement on `key` in `reqs` allows `value`.
pub fn label_allowed(reqs: &[Requirement], key: &str, value: Option<&str>) -> bool {
    reqs.iter()
        .filter(|r| r.key == key)
        .all(|r| satisfies(r, value))
}

/// The single value an instance type's requirement pins a label to, if any.
pub fn single_value<'a>(it: &'a InstanceType, key: &str) -> Option<&'a str> {
    it.requirements
        .iter()
        .find(|r| r.key == key && matches!(r.operator, Operator::In) && r.values.len() == 1)
        .map(|r| r.values[0].as_str())
}

/// The cheapest available offering of the cheapest compatible instance type
/// for this NodeClaim: what to launch. None means insufficient capacity.
pub fn cheapest_offering<'a>(
    claim: &NodeClaim,
    types: &'a [InstanceType],
) -> Option<(&'a InstanceType, &'a Offering)> {
    let mut best: Option<(&InstanceType, &Offering)> = None;
    for it in types {
        if let Some(o) = cheapest_offering_of(claim, it)
            && best.is_none_or(|(_, b)| o.price < b.price)
        {
            best = Some((it, o));
        }
    }
    best
}

/// The cheapest available offering of this one instance type that the
/// NodeClaim allows; None if the type does not fit it. For a provider that
/// builds its catalog a type at a time rather than holding it whole.
pub fn cheapest_offering_of<'a>(claim: &NodeClaim, it: &'a InstanceType) -> Option<&'a Offering> {
    let type_ok = claim.requirements.iter().all(|r| {
        if r.key == labels::ZONE || r.key == labels::CAPACITY_TYPE {
            return true;
        }
        // Labels the host puts on the node (the NodePool's name, its
        // template labels) say nothing about the machine.
        if r.key == labels::NODE_POOL || claim.labels.iter().any(|(k, _)| *k == r.key) {
            return true;
        }
        // A label the type does not pin is absent on its nodes.
        satisfies(r, single_value(it, &r.key))
    });
    if !type_ok {
        return None;
    }
    let allowed = |o: &&Offering| {
        o.available
            && label_allowed(&claim.requirements, labels::ZONE, Some(&o.zone))
            && label_allowed(
                &claim.requirements,
                labels::CAPACITY_TYPE,
                Some(&o.capacity_type),
            )
    };
    let mut best: Option<&Offering> = None;
    for o in it.offerings.iter().filter(allowed) {
        if best.is_none_or(|b| o.price < b.price) {
            best = Some(o);
        }
    }
    best
}
