//! The INSTANCE_TYPES catalog kept type by type in the plugin's cache, which
//! a load with other settings starts without. A create on a new instance
//! reads the types its claim lists from there, instead of copying the whole
//! setting into its memory: in a burst of launches, every new instance did.

use crate::karpenter_json::Index;
use karpenter_plugin_sdk::prelude::*;

/// A type's entry: the JSON array of the catalog's items of that name.
const TYPE_PREFIX: &str = "instance-type/";
/// Set before the types are stored, so instances that read the catalog
/// meanwhile do not store them all again.
const STORED_MARKER: &str = "instance-types-stored";

/// The types of this name, from the cache; none when it does not hold them.
pub fn named(name: &str) -> Option<Result<Vec<InstanceType>, String>> {
    let json = String::from_utf8(cache::get(&format!("{TYPE_PREFIX}{name}"))?).ok()?;
    Some(Index::of(&json).and_then(|index| index.each().collect()))
}

/// Puts each type of the catalog in the cache, unless an instance has begun
/// to. A type not there yet, or refused by the plugin's memory budget, is
/// only missed: it is then read from the setting.
pub fn store(index: &Index) {
    if cache::get(STORED_MARKER).is_some() {
        return;
    }
    cache::set(STORED_MARKER, b"", 0);
    for (name, items) in index.by_name() {
        let json = format!("[{}]", items.join(","));
        cache::set(&format!("{TYPE_PREFIX}{name}"), json.as_bytes(), 0);
    }
}
