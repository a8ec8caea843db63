//! Status conditions as Kubernetes keeps them: the transition time moves
//! only when the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.to_string();
            c.reason = reason.to_string();
            c.message = message.to_string();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            last_transition_time: now,
            observed_generation: generation,
        }),
    }
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Equal ignoring transition times: whether a status write is needed.
pub fn same(a: &[Condition], b: &[Condition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
        })
}
