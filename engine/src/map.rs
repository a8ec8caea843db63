//! A small sorted map from strings to values, serialized as a JSON object.
//!
//! Labels and resource lists hold a handful of entries; a sorted vector uses a
//! fraction of a `BTreeMap`'s memory (whose nodes hold room for eleven), which
//! matters for snapshots of 100,000 pods.

use std::borrow::Borrow;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Keys are unique and sorted; iteration is in key order.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringMap<V>(Vec<(String, V)>);

impl<V> StringMap<V> {
    pub fn new() -> Self {
        StringMap(Vec::new())
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        String: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        String: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Inserts or replaces; returns the old value.
    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        match self.find(key.as_str()) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        String: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.0.remove(i).1)
    }

    /// The value for `key`, inserted with `default()` if missing.
    pub fn entry_or_insert_with(&mut self, key: &str, default: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(key) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (key.to_string(), default()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        self.0.retain_mut(|(k, v)| keep(k, v));
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
}

impl<V: fmt::Debug> fmt::Debug for StringMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<String>, V> FromIterator<(K, V)> for StringMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = StringMap::new();
        m.extend(iter);
        m
    }
}

impl<K: Into<String>, V> Extend<(K, V)> for StringMap<V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k.into(), v);
        }
    }
}

impl<K: Into<String>, V, const N: usize> From<[(K, V); N]> for StringMap<V> {
    fn from(items: [(K, V); N]) -> Self {
        items.into_iter().collect()
    }
}

impl<'a, V> IntoIterator for &'a StringMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, V)>,
        fn(&'a (String, V)) -> (&'a String, &'a V),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<V> IntoIterator for StringMap<V> {
    type Item = (String, V);
    type IntoIter = std::vec::IntoIter<(String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<V> std::ops::Index<&str> for StringMap<V> {
    type Output = V;
    /// Panics when the key is missing, like `BTreeMap`.
    fn index(&self, key: &str) -> &V {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no entry for key {key:?}"),
        }
    }
}

impl<V: Serialize> Serialize for StringMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for StringMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = StringMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map with string keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut m = StringMap::new();
                while let Some((k, v)) = access.next_entry::<String, V>()? {
                    m.insert(k, v);
                }
                Ok(m)
            }
        }
        d.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_unique_and_map_shaped_json() {
        let mut m: StringMap<i64> = [("memory", 2), ("cpu", 1)].into();
        assert_eq!(m.insert("cpu".into(), 3), Some(1));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["cpu", "memory"]);
        assert_eq!(m["cpu"], 3);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"cpu":3,"memory":2}"#);
        let back: StringMap<i64> = serde_json::from_str(r#"{"memory":2,"cpu":3}"#).unwrap();
        assert_eq!(back, m);
    }
}
