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

    /// Loads the component from the cache, or compiles it and stores it.
    pub fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        wasm: &[u8],
    ) -> anyhow::Result<(Component, bool)> {
        let file = format!("{sha256}.cwasm");
        if let Ok(bytes) = self.dir.read(&file) {
            match deserialize(engine, &bytes) {
                Ok(component) => return Ok((component, true)),
                Err(e) => {
                    tracing::warn!(file, error = %e, "discarding unusable precompiled plugin")
                }
            }
        }
        let component = Component::new(engine, wasm)?;
        match component.serialize() {
            Ok(bytes) => {
                // Write then rename, so a concurrent reader never sees half a file.
                let tmp = format!("{file}.tmp");
                if let Err(e) = self
                    .dir
                    .write(&tmp, &bytes)
                    .and_then(|()| self.dir.rename(&tmp, &self.dir, &file))
                {
                    tracing::warn!(file, error = %e, "could not store precompiled plugin");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not serialize compiled plugin"),
        }
        Ok((component, false))
    }
}

#[allow(unsafe_code)]
fn deserialize(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    // SAFETY: the bytes come from this cache's directory, written only by
    // `Component::serialize` of an engine with the same compatibility hash.
    Ok(unsafe { Component::deserialize(engine, bytes) }?)
}

fn wasmtime_version() -> &'static str {
    // The wasmtime crate does not export its version; the lockfile pins it and
    // the compatibility hash covers the rest.
    "48"
}
