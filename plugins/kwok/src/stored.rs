//! The INSTANCE_TYPES catalog kept type by type in the plugin's cache, which
//! the host empties when the settings change. A create on a new instance
//! reads the types its claim lists from there, instead of copying the whole
//! setting into its memory: in a burst of launches, every new instance did.

use crate::karpenter_json::Index;
use karpenter_plugin_sdk::prelude::*;

/// A type's entry: the JSON array of the catalog's items of that name.
const TYPE: &str = "instance-type/";
/// Set once every type is stored, so later instances do not store them again.
const STORED: &str = "instance-types-stored";

/// The types of this name, from the cache; none when it does not hold them.
pub fn named(name: &str) -> Option<Result<Vec<InstanceType>, String>> {
    let json = String::from_utf8(cache::get(&format!("{TYPE}{name}"))?).ok()?;
    Some(Index::of(&json).and_then(|index| index.each().collect()))
}

/// Puts each type of the catalog in the cache, unless an instance did. An
/// entry the plugin's memory budget refuses is only missed: its type is then
/// read from the setting.
pub fn store(index: &Index) {
    if cache::get(STORED).is_some() {
        return;
    }
    for (name, items) in index.by_name() {
        let json = format!("[{}]", items.join(","));
        cache::set(&format!("{TYPE}{name}"), json.as_bytes(), 0);
    }
    cache::set(STORED, b"", 0);
}
