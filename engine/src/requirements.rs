//! The label requirement algebra over interned values.
//!
//! A requirement on one key is a set of allowed values: either finite (`In`,
//! `DoesNotExist` = empty) or the complement of a finite set (`NotIn`,
//! `Exists`), optionally bounded by integer limits (`Gt`, `Lt`, `Gte`, `Lte`).
//! Intersection narrows; compatibility follows Karpenter: two requirements
//! are compatible when they share a value, or when both allow the label to be
//! absent (`NotIn`, `DoesNotExist`).

use crate::intern::Interner;
use crate::snapshot::{Operator, Requirement};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ValueSet {
    complement: bool,
    /// Sorted, unique. Finite sets hold only values within the bounds.
    values: Vec<u32>,
    /// Exclusive integer bounds; only kept on complement sets.
    gt: Option<i64>,
    lt: Option<i64>,
}

impl ValueSet {
    pub(crate) fn any() -> Self {
        ValueSet {
            complement: true,
            values: Vec::new(),
            gt: None,
            lt: None,
        }
    }

    pub(crate) fn none() -> Self {
        ValueSet {
            complement: false,
            values: Vec::new(),
            gt: None,
            lt: None,
        }
    }

    pub(crate) fn single(v: u32) -> Self {
        ValueSet {
            complement: false,
            values: vec![v],
            gt: None,
            lt: None,
        }
    }

    pub(crate) fn finite(mut values: Vec<u32>) -> Self {
        values.sort_unstable();
        values.dedup();
        ValueSet {
            complement: false,
            values,
            gt: None,
            lt: None,
        }
    }

    pub(crate) fn not_in(mut values: Vec<u32>) -> Self {
        values.sort_unstable();
        values.dedup();
        ValueSet {
            complement: true,
            values,
            gt: None,
            lt: None,
        }
    }

    /// Builds the set for `op values`, interning values as needed.
    pub(crate) fn from_operator(op: Operator, values: &[String], strings: &mut Interner) -> Self {
        let ids = |strings: &mut Interner| values.iter().map(|v| strings.intern(v)).collect();
        let bound = |delta: i64| {
            values
                .first()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map(|n| n.saturating_add(delta))
        };
        match op {
            Operator::In => ValueSet::finite(ids(strings)),
            Operator::NotIn => ValueSet::not_in(ids(strings)),
            Operator::Exists => ValueSet::any(),
            Operator::DoesNotExist => ValueSet::none(),
            Operator::Gt | Operator::Gte => match bound(if op == Operator::Gt { 0 } else { -1 }) {
                Some(n) => ValueSet {
                    gt: Some(n),
                    ..ValueSet::any()
                },
                None => ValueSet::none(),
            },
            Operator::Lt | Operator::Lte => match bound(if op == Operator::Lt { 0 } else { 1 }) {
                Some(n) => ValueSet {
                    lt: Some(n),
                    ..ValueSet::any()
                },
                None => ValueSet::none(),
            },
        }
    }

    fn in_bounds(&self, v: u32, strings: &Interner) -> bool {
        if self.gt.is_none() && self.lt.is_none() {
            return true;
        }
        match strings.number(v) {
            Some(n) => self.gt.is_none_or(|g| n > g) && self.lt.is_none_or(|l| n < l),
            None => false,
        }
    }

    pub(crate) fn contains(&self, v: u32, strings: &Interner) -> bool {
        if self.complement {
            self.values.binary_search(&v).is_err() && self.in_bounds(v, strings)
        } else {
            self.values.binary_search(&v).is_ok()
        }
    }

    pub(crate) fn intersect(&self, other: &ValueSet, strings: &Interner) -> ValueSet {
        match (self.complement, other.complement) {
            (false, false) => {
                let mut out = Vec::with_capacity(self.values.len().min(other.values.len()));
                let (mut i, mut j) = (0, 0);
                while i < self.values.len() && j < other.values.len() {
                    match self.values[i].cmp(&other.values[j]) {
                        std::cmp::Ordering::Less => i += 1,
                        std::cmp::Ordering::Greater => j += 1,
                        std::cmp::Ordering::Equal => {
                            out.push(self.values[i]);
                            i += 1;
                            j += 1;
                        }
                    }
                }
                ValueSet {
                    values: out,
                    ..ValueSet::none()
                }
            }
            (false, true) => other.keep_members_of(self, strings),
            (true, false) => self.keep_members_of(other, strings),
            (true, true) => {
                let mut values = self.values.clone();
                values.extend_from_slice(&other.values);
                values.sort_unstable();
                values.dedup();
                ValueSet {
                    complement: true,
                    values,
                    gt: max_opt(self.gt, other.gt),
                    lt: min_opt(self.lt, other.lt),
                }
            }
        }
    }

    /// `finite ∩ self` where self is a complement set.
    fn keep_members_of(&self, finite: &ValueSet, strings: &Interner) -> ValueSet {
        ValueSet {
            values: finite
                .values
                .iter()
                .copied()
                .filter(|&v| self.contains(v, strings))
                .collect(),
            ..ValueSet::none()
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        if !self.complement {
            return self.values.is_empty();
        }
        match (self.gt, self.lt) {
            (Some(g), Some(l)) => l.saturating_sub(g) <= 1,
            _ => false,
        }
    }

    /// `NotIn` and `DoesNotExist` are met by a node without the label.
    pub(crate) fn allows_absence(&self) -> bool {
        let unbounded = self.gt.is_none() && self.lt.is_none();
        if self.complement {
            unbounded && !self.values.is_empty()
        } else {
            self.values.is_empty()
        }
    }

    /// Karpenter's `Intersects` for one key.
    pub(crate) fn compatible(&self, other: &ValueSet, strings: &Interner) -> bool {
        self.shares_value(other, strings) || (self.allows_absence() && other.allows_absence())
    }

    /// Whether the intersection is non-empty, without building it.
    fn shares_value(&self, other: &ValueSet, strings: &Interner) -> bool {
        match (self.complement, other.complement) {
            (false, false) => {
                let (mut i, mut j) = (0, 0);
                while i < self.values.len() && j < other.values.len() {
                    match self.values[i].cmp(&other.values[j]) {
                        std::cmp::Ordering::Less => i += 1,
                        std::cmp::Ordering::Greater => j += 1,
                        std::cmp::Ordering::Equal => return true,
                    }
                }
                false
            }
            (false, true) => self.values.iter().any(|&v| other.contains(v, strings)),
            (true, false) => other.values.iter().any(|&v| self.contains(v, strings)),
            (true, true) => match (max_opt(self.gt, other.gt), min_opt(self.lt, other.lt)) {
                (Some(g), Some(l)) => l.saturating_sub(g) > 1,
                _ => true,
            },
        }
    }

    /// Whether a node with this label value (or without the label) satisfies it.
    pub(crate) fn matches_label(&self, value: Option<u32>, strings: &Interner) -> bool {
        match value {
            Some(v) => self.contains(v, strings),
            None => self.allows_absence(),
        }
    }

    pub(crate) fn finite_values(&self) -> Option<&[u32]> {
        (!self.complement).then_some(self.values.as_slice())
    }

    pub(crate) fn single_value(&self) -> Option<u32> {
        match (self.complement, self.values.as_slice()) {
            (false, [v]) => Some(*v),
            _ => None,
        }
    }

    /// Back to the API form, values sorted by string.
    pub(crate) fn to_requirement(&self, key: &str, strings: &Interner) -> Vec<Requirement> {
        let names = |vals: &[u32]| {
            let mut v: Vec<String> = vals.iter().map(|&id| strings.str(id).to_string()).collect();
            v.sort();
            v
        };
        let mut out = Vec::new();
        let req = |operator, values| Requirement {
            key: key.to_string(),
            operator,
            values,
            min_values: None,
        };
        if !self.complement {
            if self.values.is_empty() {
                out.push(req(Operator::DoesNotExist, Vec::new()));
            } else {
                out.push(req(Operator::In, names(&self.values)));
            }
            return out;
        }
        if self.values.is_empty() && self.gt.is_none() && self.lt.is_none() {
            out.push(req(Operator::Exists, Vec::new()));
        }
        if !self.values.is_empty() {
            out.push(req(Operator::NotIn, names(&self.values)));
        }
        if let Some(g) = self.gt {
            out.push(req(Operator::Gt, vec![g.to_string()]));
        }
        if let Some(l) = self.lt {
            out.push(req(Operator::Lt, vec![l.to_string()]));
        }
        out
    }

    /// Readable form for messages: `key In [a b]`.
    pub(crate) fn describe(&self, key: &str, strings: &Interner) -> String {
        self.to_requirement(key, strings)
            .iter()
            .map(|r| {
                if r.values.is_empty() {
                    format!("{} {:?}", r.key, r.operator)
                } else {
                    format!("{} {:?} [{}]", r.key, r.operator, r.values.join(" "))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Requirements on several keys, ANDed; sorted by key id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Reqs {
    entries: Vec<(u32, ValueSet)>,
    /// `minValues` per key, sorted by key id.
    min_values: Vec<(u32, u32)>,
}

impl Reqs {
    pub(crate) fn from_api(reqs: &[Requirement], strings: &mut Interner) -> Reqs {
        let mut out = Reqs::default();
        for r in reqs {
            let key = strings.intern(&r.key);
            let set = ValueSet::from_operator(r.operator, &r.values, strings);
            out.add(key, &set, strings);
            if let Some(m) = r.min_values {
                out.set_min_values(key, m);
            }
        }
        out
    }

    pub(crate) fn get(&self, key: u32) -> Option<&ValueSet> {
        self.entries
            .binary_search_by_key(&key, |e| e.0)
            .ok()
            .map(|i| &self.entries[i].1)
    }

    pub(crate) fn entries(&self) -> &[(u32, ValueSet)] {
        &self.entries
    }

    pub(crate) fn min_values(&self) -> &[(u32, u32)] {
        &self.min_values
    }

    /// Narrows `key` by `set`.
    pub(crate) fn add(&mut self, key: u32, set: &ValueSet, strings: &Interner) {
        match self.entries.binary_search_by_key(&key, |e| e.0) {
            Ok(i) => {
                let merged = self.entries[i].1.intersect(set, strings);
                self.entries[i].1 = merged;
            }
            Err(i) => self.entries.insert(i, (key, set.clone())),
        }
    }

    /// Replaces the set on `key`.
    pub(crate) fn put(&mut self, key: u32, set: ValueSet) {
        match self.entries.binary_search_by_key(&key, |e| e.0) {
            Ok(i) => self.entries[i].1 = set,
            Err(i) => self.entries.insert(i, (key, set)),
        }
    }

    pub(crate) fn add_all(&mut self, other: &Reqs, strings: &Interner) {
        for (k, s) in &other.entries {
            self.add(*k, s, strings);
        }
        for &(k, m) in &other.min_values {
            self.set_min_values(k, m);
        }
    }

    pub(crate) fn set_min_values(&mut self, key: u32, m: u32) {
        match self.min_values.binary_search_by_key(&key, |e| e.0) {
            Ok(i) => self.min_values[i].1 = self.min_values[i].1.max(m),
            Err(i) => self.min_values.insert(i, (key, m)),
        }
    }

    /// Whether a node with these labels (sorted by key) satisfies every entry.
    pub(crate) fn matches_labels(&self, labels: &[(u32, u32)], strings: &Interner) -> bool {
        self.entries.iter().all(|(k, set)| {
            let value = labels
                .binary_search_by_key(k, |l| l.0)
                .ok()
                .map(|i| labels[i].1);
            set.matches_label(value, strings)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(op: Operator, vals: &[&str], s: &mut Interner) -> ValueSet {
        let v: Vec<String> = vals.iter().map(|x| x.to_string()).collect();
        ValueSet::from_operator(op, &v, s)
    }

    #[test]
    fn operators_match_labels() {
        let mut s = Interner::default();
        let a = s.intern("a");
        let n8 = s.intern("8");
        let n16 = s.intern("16");
        let cases = [
            (set(Operator::In, &["a"], &mut s), Some(a), true),
            (set(Operator::In, &["a"], &mut s), None, false),
            (set(Operator::NotIn, &["a"], &mut s), Some(a), false),
            (set(Operator::NotIn, &["a"], &mut s), None, true),
            (set(Operator::Exists, &[], &mut s), None, false),
            (set(Operator::Exists, &[], &mut s), Some(a), true),
            (set(Operator::DoesNotExist, &[], &mut s), None, true),
            (set(Operator::DoesNotExist, &[], &mut s), Some(a), false),
            (set(Operator::Gt, &["8"], &mut s), Some(n16), true),
            (set(Operator::Gt, &["8"], &mut s), Some(n8), false),
            (set(Operator::Gt, &["8"], &mut s), Some(a), false),
            (set(Operator::Gte, &["8"], &mut s), Some(n8), true),
            (set(Operator::Lt, &["16"], &mut s), Some(n16), false),
            (set(Operator::Lte, &["16"], &mut s), Some(n16), true),
            (set(Operator::Lt, &["16"], &mut s), Some(n8), true),
        ];
        for (i, (set, value, want)) in cases.iter().enumerate() {
            assert_eq!(set.matches_label(*value, &s), *want, "case {i}: {set:?}");
        }
    }

    #[test]
    fn intersection_and_compatibility() {
        let mut s = Interner::default();
        let ab = set(Operator::In, &["a", "b"], &mut s);
        let bc = set(Operator::In, &["b", "c"], &mut s);
        let b = s.intern("b");
        assert_eq!(ab.intersect(&bc, &s).single_value(), Some(b));
        let not_b = set(Operator::NotIn, &["b"], &mut s);
        assert!(
            ab.intersect(&not_b, &s)
                .finite_values()
                .is_some_and(|v| v.len() == 1)
        );
        let dne = set(Operator::DoesNotExist, &[], &mut s);
        assert!(dne.compatible(&not_b, &s));
        assert!(!dne.compatible(&ab, &s));
        let gt = set(Operator::Gt, &["4"], &mut s);
        let lt = set(Operator::Lt, &["5"], &mut s);
        assert!(gt.intersect(&lt, &s).is_empty());
        let nums = set(Operator::In, &["4", "8"], &mut s);
        let eight = s.intern("8");
        assert_eq!(nums.intersect(&gt, &s).single_value(), Some(eight));
    }
}
