//! A store of watched objects keyed by UID, for pods: the one kind counted
//! in tens of thousands.
//!
//! kube's reflector store keys each object by an `ObjectRef`: name,
//! namespace, resourceVersion and UID as strings, four allocations a slot
//! beside the object. Keyed by the UID as a number, a slot is a few words
//! and allocates nothing. The writer also takes
//! each object as it comes off the watch rather than cloning it.

use super::uid;
use kube::Resource;
use kube::runtime::watcher::Event;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use tokio::sync::watch;

type Objects<K> = HashMap<u128, Arc<K>>;

/// The read side, cheap to clone.
pub struct UidStore<K> {
    objects: Arc<RwLock<Objects<K>>>,
    ready: watch::Receiver<bool>,
}

impl<K> Clone for UidStore<K> {
    fn clone(&self) -> Self {
        UidStore {
            objects: self.objects.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The write side, fed every watch event.
pub struct Writer<K> {
    objects: Arc<RwLock<Objects<K>>>,
    ready: watch::Sender<bool>,
    /// A relist being received, swapped in whole when it is done.
    relist: Option<Objects<K>>,
}

pub fn store<K>() -> (UidStore<K>, Writer<K>) {
    let objects = Arc::new(RwLock::new(HashMap::new()));
    let (ready, ready_rx) = watch::channel(false);
    (
        UidStore {
            objects: objects.clone(),
            ready: ready_rx,
        },
        Writer {
            objects,
            ready,
            relist: None,
        },
    )
}

fn key<K: Resource>(o: &K) -> u128 {
    uid::key(o.meta().uid.as_deref().unwrap_or_default())
}

impl<K: Resource<DynamicType = ()>> UidStore<K> {
    /// Every object, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.values().cloned().collect()
    }

    /// Returns once the first full list is in.
    pub async fn wait_until_ready(&self) -> anyhow::Result<()> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map_err(|_| anyhow::anyhow!("the {} watcher stopped", K::kind(&())))?;
        Ok(())
    }
}

impl<K: Resource> Writer<K> {
    /// Applies one event; gives it back with the stored object.
    pub fn apply(&mut self, event: Event<K>) -> Event<Arc<K>> {
        let objects = || self.objects.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(o) => {
                let o = Arc::new(o);
                objects().insert(key(&*o), o.clone());
                Event::Apply(o)
            }
            Event::Delete(o) => {
                objects().remove(&key(&o));
                Event::Delete(Arc::new(o))
            }
            Event::Init => {
                self.relist = Some(HashMap::new());
                Event::Init
            }
            Event::InitApply(o) => {
                let o = Arc::new(o);
                let relist = self.relist.get_or_insert_with(HashMap::new);
                relist.insert(key(&*o), o.clone());
                Event::InitApply(o)
            }
            Event::InitDone => {
                if let Some(relist) = self.relist.take() {
                    *objects() = relist;
                }
                self.ready.send_replace(true);
                Event::InitDone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn object(name: &str, uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(store: &UidStore<ConfigMap>) -> Vec<String> {
        let mut names: Vec<String> = store
            .state()
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    const A: &str = "00000000-0000-4000-8000-00000000000a";
    const B: &str = "00000000-0000-4000-8000-00000000000b";

    #[tokio::test]
    async fn a_relist_replaces_the_objects_whole_and_makes_the_store_ready() {
        let (store, mut writer) = store::<ConfigMap>();
        assert!(!*store.ready.borrow());
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(object("a", A)));
        writer.apply(Event::InitApply(object("b", B)));
        // Not visible until the list is complete.
        assert!(names(&store).is_empty());
        writer.apply(Event::InitDone);
        store.wait_until_ready().await.expect("ready");
        assert_eq!(names(&store), ["a", "b"]);

        // A later relist without `a`: `a` was deleted while unwatched.
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(object("b", B)));
        assert_eq!(names(&store), ["a", "b"], "the old list stays until done");
        writer.apply(Event::InitDone);
        assert_eq!(names(&store), ["b"]);
    }

    #[test]
    fn changes_replace_by_uid_and_deletes_remove() {
        let (store, mut writer) = store::<ConfigMap>();
        writer.apply(Event::Apply(object("a", A)));
        // Same UID: the same object, updated.
        writer.apply(Event::Apply(object("a-renamed", A)));
        writer.apply(Event::Apply(object("b", B)));
        assert_eq!(names(&store), ["a-renamed", "b"]);
        let given_back = writer.apply(Event::Delete(object("a-renamed", A)));
        assert!(
            matches!(given_back, Event::Delete(o) if o.metadata.name.as_deref() == Some("a-renamed"))
        );
        assert_eq!(names(&store), ["b"]);
    }
}
