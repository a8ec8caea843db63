//! A cache of precompiled plugins, so a restart loads in well under a
//! millisecond instead of compiling for tens of milliseconds.
//!
//! Entries are keyed by the engine's compatibility hash and the wasmtime
//! version (a .cwasm only loads into an identically configured engine) and by
//! the plugin's sha256. Only files this host wrote are ever deserialized.

use anyhow::Context;
use cap_std::fs::Dir;
use std::hash::{DefaultHasher, Hash, Hasher};
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct PrecompiledCache {
    dir: Dir,
}

impl PrecompiledCache {
    /// Opens (creating) the subdirectory for this engine under `root`.
    pub fn open(root: &Dir, engine: &Engine) -> anyhow::Result<Self> {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let sub = format!("wasmtime-{}-{:016x}", wasmtime_version(), h.finish());
        root.create_dir_all(&sub)
            .with_context(|| format!("creating precompiled cache {sub}"))?;
        Ok(PrecompiledCache {
            dir: root.open_dir(&sub)?,
        })
    }

    /// The cached component for this plugin, if a usable one is stored.
    pub fn get(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let file = format!("{sha256}.cwasm");
        let bytes = self.dir.read(&file).ok()?;
        match deserialize(engine, &bytes) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(file, error = %e, "discarding unusable precompiled plugin");
                None
            }
        }
    }

    /// Stores a serialized component. A failure costs only a later compile.
    pub fn put(&self, sha256: &str, serialized: &[u8]) {
        let file = format!("{sha256}.cwasm");
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = format!("{file}.tmp");
        if let Err(e) = self
            .dir
            .write(&tmp, serialized)
            .and_then(|()| self.dir.rename(&tmp, &self.dir, &file))
        {
            tracing::warn!(file, error = %e, "could not store precompiled plugin");
        }
    }
}

/// Loads machine code this host produced: from the cache's directory, or
/// from its own executable compiling in a child process.
#[allow(unsafe_code)]
pub(super) fn deserialize(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    // SAFETY: the bytes were written only by `Component::serialize` of an
    // engine with the same configuration (the cache's directory is keyed by
    // its compatibility hash; the child process builds its engine from
    // `runtime::engine_config`), and wasmtime checks that header again.
    Ok(unsafe { Component::deserialize(engine, bytes) }?)
}

fn wasmtime_version() -> &'static str {
    // The wasmtime crate does not export its version; the lockfile pins it and
    // the compatibility hash covers the rest.
    "48"
}
