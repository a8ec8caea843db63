//! Values many stored objects hold equal copies of, kept once.
//!
//! The pods of one ReplicaSet have the same spec but for the node they are
//! bound to, and running pods have the same status conditions. A
//! [`Shared`] value is parsed as usual, then swapped for the copy already
//! held, if any: 10,000 pods of a few Deployments keep a few specs.
//!
//! The pool holds weak references, so a value lives only as long as some
//! object uses it; dead entries are swept as the pool grows.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Deref;
use std::sync::{Arc, Mutex, Weak};

/// A value kept once per distinct content; reads as `&T`.
#[derive(Debug, PartialEq)]
pub struct Shared<T>(Arc<T>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> Shared<T> {
    /// Where the held copy lives: equal for values shared from one pool
    /// entry (and so equal in content), for as long as this one lives.
    pub fn addr(this: &Self) -> usize {
        Arc::as_ptr(&this.0) as usize
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'a, T> IntoIterator for &'a Shared<T>
where
    &'a T: IntoIterator,
{
    type Item = <&'a T as IntoIterator>::Item;
    type IntoIter = <&'a T as IntoIterator>::IntoIter;
    fn into_iter(self) -> Self::IntoIter {
        self.0.as_ref().into_iter()
    }
}

/// A type with a pool of its own shared values.
pub trait Poolable: Serialize + PartialEq + Sized + Send + Sync + 'static {
    fn pool() -> &'static Pool<Self>;
}

/// Gives each listed type a pool of its own.
macro_rules! poolable {
    ($($t:ty),+ $(,)?) => {$(
        impl $crate::slim::shared::Poolable for $t {
            fn pool() -> &'static $crate::slim::shared::Pool<Self> {
                static POOL: std::sync::LazyLock<$crate::slim::shared::Pool<$t>> =
                    std::sync::LazyLock::new($crate::slim::shared::Pool::new);
                &POOL
            }
        }
    )+};
}
pub(crate) use poolable;

/// Weak references to the live values of one type, by content hash.
pub struct Pool<T> {
    entries: Mutex<Entries<T>>,
}

struct Entries<T> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    /// Pool size after the last sweep; the next sweep comes at twice this.
    swept_at: usize,
}

impl<T: Poolable> Pool<T> {
    pub fn new() -> Self {
        Pool {
            entries: Mutex::new(Entries {
                by_hash: HashMap::new(),
                swept_at: 64,
            }),
        }
    }

    /// The held copy equal to `value`, or `value` itself, now held.
    pub fn share(&self, value: T) -> Shared<T> {
        // The JSON form is the content: the Kubernetes types have no `Hash`.
        let mut hasher = DefaultHasher::new();
        match serde_json::to_vec(&value) {
            Ok(bytes) => bytes.hash(&mut hasher),
            // Cannot happen for plain data; such a value is simply not shared.
            Err(_) => return Shared(Arc::new(value)),
        }
        let hash = hasher.finish();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = entries.by_hash.entry(hash).or_default();
        if let Some(held) = bucket
            .iter()
            .filter_map(Weak::upgrade)
            .find(|held| **held == value)
        {
            return Shared(held);
        }
        let fresh = Arc::new(value);
        bucket.retain(|w| w.strong_count() > 0);
        bucket.push(Arc::downgrade(&fresh));
        if entries.by_hash.len() >= entries.swept_at {
            entries
                .by_hash
                .retain(|_, b| b.iter().any(|w| w.strong_count() > 0));
            entries.swept_at = (entries.by_hash.len() * 2).max(64);
        }
        Shared(fresh)
    }

    /// How many values the pool knows of (live or not yet swept).
    #[cfg(test)]
    fn known(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.by_hash.values().map(Vec::len).sum()
    }
}

impl<T: Poolable> Default for Pool<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Poolable> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        T::pool().share(value)
    }
}

impl<T: Poolable + Default> Default for Shared<T> {
    fn default() -> Self {
        T::default().into()
    }
}

/// A shared field has the schema of its value: sharing is not on the wire.
impl<T: schemars::JsonSchema> schemars::JsonSchema for Shared<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Poolable + DeserializeOwned> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Shared::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct Spec {
        image: String,
    }

    poolable!(Spec);

    fn spec(image: &str) -> Shared<Spec> {
        Spec {
            image: image.into(),
        }
        .into()
    }

    #[test]
    fn equal_values_are_kept_once_and_dropped_with_their_last_user() {
        let a = spec("a");
        let again: Shared<Spec> = serde_json::from_str(r#"{"image":"a"}"#).expect("parses");
        assert!(Arc::ptr_eq(&a.0, &again.0));
        let b = spec("b");
        assert!(!Arc::ptr_eq(&a.0, &b.0));
        assert_eq!(b.image, "b");

        let weak = Arc::downgrade(&a.0);
        drop((a, again));
        assert!(weak.upgrade().is_none(), "the pool must not keep it alive");
        // A new copy is a new value, not the dead one.
        assert_eq!(spec("a").image, "a");
    }

    #[test]
    fn dead_entries_are_swept_as_the_pool_grows() {
        for i in 0..1_000 {
            drop(spec(&format!("gone-{i}")));
        }
        let kept = spec("kept");
        let known = Spec::pool().known();
        assert!(known < 200, "{known} entries");
        assert_eq!(kept.image, "kept");
    }
}
