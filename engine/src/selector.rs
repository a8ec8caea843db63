//! Label selectors over interned pod labels.

use crate::intern::Interner;
use crate::snapshot::{LabelSelector, SelectorOperator};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Selector {
    /// A missing selector selects no pod.
    nothing: bool,
    /// Sorted; each with sorted values.
    exprs: Vec<(u32, SelectorOperator, Vec<u32>)>,
}

impl Selector {
    /// `extra` adds `key = value` terms (from `matchLabelKeys`).
    pub(crate) fn compile(
        sel: Option<&LabelSelector>,
        extra: &[(u32, u32)],
        strings: &mut Interner,
    ) -> Selector {
        let Some(sel) = sel else {
            return Selector {
                nothing: true,
                exprs: Vec::new(),
            };
        };
        let mut exprs: Vec<(u32, SelectorOperator, Vec<u32>)> = sel
            .match_labels
            .iter()
            .map(|(k, v)| {
                (
                    strings.intern(k),
                    SelectorOperator::In,
                    vec![strings.intern(v)],
                )
            })
            .collect();
        for e in &sel.match_expressions {
            let mut values: Vec<u32> = e.values.iter().map(|v| strings.intern(v)).collect();
            values.sort_unstable();
            values.dedup();
            exprs.push((strings.intern(&e.key), e.operator, values));
        }
        exprs.extend(
            extra
                .iter()
                .map(|&(k, v)| (k, SelectorOperator::In, vec![v])),
        );
        exprs.sort();
        exprs.dedup();
        Selector {
            nothing: false,
            exprs,
        }
    }

    /// `labels` sorted by key.
    pub(crate) fn matches(&self, labels: &[(u32, u32)]) -> bool {
        if self.nothing {
            return false;
        }
        self.exprs.iter().all(|(key, op, values)| {
            let value = labels
                .binary_search_by_key(key, |l| l.0)
                .ok()
                .map(|i| labels[i].1);
            match (op, value) {
                (SelectorOperator::In, Some(v)) => values.binary_search(&v).is_ok(),
                (SelectorOperator::In, None) => false,
                (SelectorOperator::NotIn, Some(v)) => values.binary_search(&v).is_err(),
                (SelectorOperator::NotIn, None) => true,
                (SelectorOperator::Exists, v) => v.is_some(),
                (SelectorOperator::DoesNotExist, v) => v.is_none(),
            }
        })
    }
}

/// Interns a label map into a key-sorted list of ids.
pub(crate) fn intern_labels<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    strings: &mut Interner,
) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = labels
        .into_iter()
        .map(|(k, v)| (strings.intern(k), strings.intern(v)))
        .collect();
    out.sort_unstable();
    out.dedup_by_key(|l| l.0);
    out
}

pub(crate) fn label_value(labels: &[(u32, u32)], key: u32) -> Option<u32> {
    labels
        .binary_search_by_key(&key, |l| l.0)
        .ok()
        .map(|i| labels[i].1)
}
