//! Evaluating a NodeClaim's requirements against an instance type, as every
//! provider must when it picks what to launch.

use crate::bindings::karpenter::provider::types::{
    InstanceType, NodeClaim, Offering, Operator, Requirement,
};
use vocabulary::labels;

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

/// What to launch for this NodeClaim: the first instance type it lists
/// (see [`listed_rank`]) with an available offering it allows, on that
/// type's cheapest such offering; among types it does not list, the
/// cheapest by this provider's prices. None means insufficient capacity.
pub fn offering_to_launch<'a>(
    claim: &NodeClaim,
    types: &'a [InstanceType],
) -> Option<(&'a InstanceType, &'a Offering)> {
    let rank = listed_rank(claim);
    let mut best: Option<(usize, &InstanceType, &Offering)> = None;
    for it in types {
        if let Some(o) = cheapest_offering_of(claim, it) {
            let r = rank(&it.name);
            if best.is_none_or(|(br, _, b)| (r, o.price) < (br, b.price)) {
                best = Some((r, it, o));
            }
        }
    }
    best.map(|(_, it, o)| (it, o))
}

/// Where the NodeClaim lists a type under `node.kubernetes.io/instance-type`:
/// the host lists them cheapest first at the cluster's prices, which its
/// NodeOverlays may make differ from the provider's own. Types it does not
/// list (a claim that names none, a static NodePool's) rank last.
pub fn listed_rank(claim: &NodeClaim) -> impl Fn(&str) -> usize + '_ {
    let listed = listed_types(claim);
    move |name| listed.iter().position(|t| t == name).unwrap_or(usize::MAX)
}

/// The instance types the NodeClaim lists, in its order (cheapest first);
/// empty when it lists none.
pub fn listed_types(claim: &NodeClaim) -> &[String] {
    claim
        .requirements
        .iter()
        .find(|r| r.key == labels::INSTANCE_TYPE && matches!(r.operator, Operator::In))
        .map_or(&[], |r| r.values.as_slice())
}

/// The cheapest available offering of this one instance type that the
/// NodeClaim allows; None if none does. For a provider that builds its
/// catalog a type at a time rather than holding it whole.
///
/// A requirement is met when any value the label could take on the node
/// satisfies it: the offering's zone and capacity type, an offering's own
/// requirement on the key (an Azure placement scope), else the type's `In`
/// values, else the label is absent. Requirements on labels the host puts
/// on the node (the NodePool's name, its template labels) say nothing about
/// the machine and are skipped.
pub fn cheapest_offering_of<'a>(claim: &NodeClaim, it: &'a InstanceType) -> Option<&'a Offering> {
    let machine: Vec<&Requirement> = claim
        .requirements
        .iter()
        .filter(|r| r.key != labels::NODE_POOL && !claim.labels.iter().any(|(k, _)| *k == r.key))
        .collect();
    let mut best: Option<&Offering> = None;
    for o in it.offerings.iter().filter(|o| o.available) {
        let fits = machine.iter().all(|r| {
            let values: &[String] = if r.key == labels::ZONE {
                std::slice::from_ref(&o.zone)
            } else if r.key == labels::CAPACITY_TYPE {
                std::slice::from_ref(&o.capacity_type)
            } else if let Some(own) = values_in(&o.requirements, &r.key) {
                own
            } else {
                values_in(&it.requirements, &r.key).unwrap_or(&[])
            };
            if values.is_empty() {
                satisfies(r, None)
            } else {
                values.iter().any(|v| satisfies(r, Some(v)))
            }
        });
        if fits && best.is_none_or(|b| o.price < b.price) {
            best = Some(o);
        }
    }
    best
}

/// The values an `In` requirement on `key` allows, if there is one.
fn values_in<'a>(reqs: &'a [Requirement], key: &str) -> Option<&'a [String]> {
    reqs.iter()
        .find(|r| r.key == key && matches!(r.operator, Operator::In))
        .map(|r| r.values.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::karpenter::provider::types::NodeClassRef;

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }

    fn offering(zone: &str, capacity_type: &str, price: f64, scope: Option<&str>) -> Offering {
        Offering {
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            available: true,
            requirements: scope
                .map(|s| vec![req("example.com/scope", Operator::In, &[s])])
                .unwrap_or_default(),
            reservation_capacity: None,
        }
    }

    fn types() -> Vec<InstanceType> {
        let it = |name: &str, gpus: &[&str], offerings: Vec<Offering>| InstanceType {
            name: name.into(),
            requirements: vec![
                req(labels::INSTANCE_TYPE, Operator::In, &[name]),
                req("example.com/gpu", Operator::In, gpus),
            ],
            offerings,
            capacity: vec![],
            overhead: crate::bindings::karpenter::provider::types::Overhead {
                kube_reserved: vec![],
                system_reserved: vec![],
                eviction_threshold: vec![],
            },
        };
        vec![
            it(
                "small",
                &[],
                vec![
                    offering("a", "spot", 0.5, Some("zonal")),
                    offering("r", "on-demand", 1.0, Some("regional")),
                    Offering {
                        available: false,
                        ..offering("b", "spot", 0.1, Some("zonal"))
                    },
                ],
            ),
            it(
                "gpu",
                &["a100", "h100"],
                vec![offering("a", "on-demand", 9.0, Some("zonal"))],
            ),
        ]
    }

    fn claim(requirements: Vec<Requirement>, labels: &[(&str, &str)]) -> NodeClaim {
        NodeClaim {
            name: "c".into(),
            node_pool: "default".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            annotations: vec![],
            taints: vec![],
            startup_taints: vec![],
            requirements,
            resource_requests: vec![],
            node_class_ref: NodeClassRef {
                group: "g".into(),
                kind: "K".into(),
                name: "n".into(),
            },
            provider_id: None,
            image_id: None,
            kubelet_version: None,
        }
    }

    fn pick(requirements: Vec<Requirement>, labels: &[(&str, &str)]) -> Option<(String, String)> {
        let types = types();
        offering_to_launch(&claim(requirements, labels), &types)
            .map(|(it, o)| (it.name.clone(), o.zone.clone()))
    }

    #[test]
    fn the_cheapest_available_offering_every_requirement_allows() {
        let some = |t: &str, z: &str| Some((t.to_string(), z.to_string()));
        assert_eq!(pick(vec![], &[]), some("small", "a"));
        // An offering's own requirement decides per offering.
        let regional = req("example.com/scope", Operator::In, &["regional"]);
        assert_eq!(pick(vec![regional], &[]), some("small", "r"));
        // Any of a type's values will do; a label the type lacks is absent.
        let h100 = req("example.com/gpu", Operator::In, &["h100"]);
        assert_eq!(pick(vec![h100], &[]), some("gpu", "a"));
        let no_gpu = req("example.com/gpu", Operator::DoesNotExist, &[]);
        assert_eq!(pick(vec![no_gpu], &[]), some("small", "a"));
        // Unavailable offerings are never chosen.
        let zone_b = req(labels::ZONE, Operator::In, &["b"]);
        assert_eq!(pick(vec![zone_b], &[]), None);
    }

    #[test]
    fn the_first_listed_type_goes_before_a_cheaper_one() {
        // The host lists gpu first (a NodeOverlay made it the cheaper one).
        let listed = req(labels::INSTANCE_TYPE, Operator::In, &["gpu", "small"]);
        assert_eq!(
            pick(vec![listed], &[]),
            Some(("gpu".to_string(), "a".to_string()))
        );
        // A listed type with nothing available is passed over.
        let listed = req(labels::INSTANCE_TYPE, Operator::In, &["gpu", "small"]);
        let zone_a_spot = req(labels::CAPACITY_TYPE, Operator::In, &["spot"]);
        assert_eq!(
            pick(vec![listed, zone_a_spot], &[]),
            Some(("small".to_string(), "a".to_string()))
        );
    }

    #[test]
    fn labels_the_host_puts_on_the_node_do_not_rule_a_machine_out() {
        let team = req("team", Operator::In, &["web"]);
        let pool = req(labels::NODE_POOL, Operator::In, &["default"]);
        assert_eq!(pick(vec![team.clone(), pool.clone()], &[]), None);
        assert!(pick(vec![team, pool], &[("team", "web")]).is_some());
    }
}
