//! Taints and tolerations.

use crate::snapshot::{Taint, TaintEffect, Toleration, TolerationOperator};

pub(crate) fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if toleration.effect.is_some_and(|e| e != taint.effect) {
        return false;
    }
    match toleration.operator {
        TolerationOperator::Exists => toleration.key.is_empty() || toleration.key == taint.key,
        TolerationOperator::Equal => toleration.key == taint.key && toleration.value == taint.value,
    }
}

/// The first taint the pod does not tolerate. `PreferNoSchedule` counts as
/// required unless `tolerate_preferred` (it is relaxed last).
pub(crate) fn first_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    tolerate_preferred: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        let soft = tolerate_preferred && t.effect == TaintEffect::PreferNoSchedule;
        !soft && !tolerations.iter().any(|tol| tolerates(tol, t))
    })
}

pub(crate) fn describe(t: &Taint) -> String {
    if t.value.is_empty() {
        format!("{}:{:?}", t.key, t.effect)
    } else {
        format!("{}={}:{:?}", t.key, t.value, t.effect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn toleration_rules() {
        let gpu = taint("nvidia.com/gpu", "true", TaintEffect::NoSchedule);
        let exact = Toleration {
            key: "nvidia.com/gpu".into(),
            value: "true".into(),
            ..Default::default()
        };
        let wrong_value = Toleration {
            value: "false".into(),
            ..exact.clone()
        };
        let exists_all = Toleration {
            operator: TolerationOperator::Exists,
            ..Default::default()
        };
        let wrong_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..exact.clone()
        };
        assert!(tolerates(&exact, &gpu));
        assert!(!tolerates(&wrong_value, &gpu));
        assert!(tolerates(&exists_all, &gpu));
        assert!(!tolerates(&wrong_effect, &gpu));
        let soft = taint("a", "", TaintEffect::PreferNoSchedule);
        assert!(first_untolerated(std::slice::from_ref(&soft), &[], false).is_some());
        assert!(first_untolerated(&[soft], &[], true).is_none());
    }
}
