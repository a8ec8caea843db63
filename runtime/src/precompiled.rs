//! A cache of precompiled plugins, so a restart loads in well under a
//! millisecond instead of compiling for tens of milliseconds.
//!
//! Entries are keyed by the engine's compatibility hash and the wasmtime
//! version (a .cwasm only loads into an identically configured engine) and by
//! the plugin's sha256. A file's name is never trusted: each starts with a
//! header naming the plugin's sha256 and the digest of the machine code that
//! follows, and a file whose header does not match the plugin asked for, or
//! whose code does not match its digest (another plugin's file copied under
//! this name, a damaged or truncated one), is discarded and the plugin
//! compiled again, never deserialized.

use anyhow::Context;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
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
        let verified = verify(&bytes, sha256).and_then(|code| deserialize(engine, code));
        match verified {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(
                    file,
                    error = format!("{e:#}"),
                    "discarding unusable precompiled plugin; compiling it again"
                );
                None
            }
        }
    }

    /// Stores a serialized component. A failure costs only a later compile.
    pub fn put(&self, sha256: &str, serialized: &[u8]) {
        let file = format!("{sha256}.cwasm");
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = format!("{file}.tmp");
        let mut contents = header(sha256, serialized).into_bytes();
        contents.extend_from_slice(serialized);
        if let Err(e) = self
            .dir
            .write(&tmp, &contents)
            .and_then(|()| self.dir.rename(&tmp, &self.dir, &file))
        {
            tracing::warn!(file, error = %e, "could not store precompiled plugin");
        }
    }
}

const MAGIC: &str = "karpenter-precompiled-v1";

/// `MAGIC <plugin sha256> <machine code sha256>\n`
fn header(plugin_sha256: &str, code: &[u8]) -> String {
    format!(
        "{MAGIC} {plugin_sha256} {}\n",
        hex::encode(Sha256::digest(code))
    )
}

/// The machine code of a cache file, if its header names this plugin and
/// its digest matches.
fn verify<'a>(file: &'a [u8], plugin_sha256: &str) -> anyhow::Result<&'a [u8]> {
    let end = file
        .iter()
        .take(256)
        .position(|b| *b == b'\n')
        .context("no header: not written by this host")?;
    let line = std::str::from_utf8(&file[..end]).context("header is not text")?;
    let code = &file[end + 1..];
    let mut fields = line.split(' ');
    anyhow::ensure!(fields.next() == Some(MAGIC), "not written by this host");
    let named = fields.next().unwrap_or_default();
    anyhow::ensure!(
        named == plugin_sha256,
        "compiled from plugin {named}, not {plugin_sha256}"
    );
    let digest = fields.next().unwrap_or_default();
    let actual = hex::encode(Sha256::digest(code));
    anyhow::ensure!(
        digest == actual,
        "machine code digest {actual} differs from its header's {digest}: damaged"
    );
    Ok(code)
}

/// Loads machine code this host produced: from the cache's directory, or
/// from its own executable compiling in a child process.
#[allow(unsafe_code)]
pub(super) fn deserialize(engine: &Engine, bytes: &[u8]) -> anyhow::Result<Component> {
    // SAFETY: the bytes were written only by `Component::serialize` of an
    // engine with the same configuration (the cache's directory is keyed by
    // its compatibility hash, and its files are verified against their
    // header's digest; the child process builds its engine from
    // `runtime::engine_config`), and wasmtime checks that header again.
    Ok(unsafe { Component::deserialize(engine, bytes) }?)
}

fn wasmtime_version() -> &'static str {
    // The wasmtime crate does not export its version; the lockfile pins it and
    // the compatibility hash covers the rest.
    "48"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_used_only_for_the_plugin_and_the_code_its_header_names() {
        let code = b"machine code".to_vec();
        let mut file = header("aaaa", &code).into_bytes();
        file.extend_from_slice(&code);
        assert_eq!(verify(&file, "aaaa").expect("valid"), &code[..]);
        let err = verify(&file, "bbbb").expect_err("another plugin's");
        assert!(
            err.to_string()
                .contains("compiled from plugin aaaa, not bbbb"),
            "{err}"
        );
        let mut damaged = file.clone();
        *damaged.last_mut().expect("byte") ^= 1;
        assert!(
            verify(&damaged, "aaaa")
                .expect_err("damaged")
                .to_string()
                .contains("damaged")
        );
        let truncated = &file[..file.len() - 3];
        assert!(verify(truncated, "aaaa").is_err());
        assert!(
            verify(&code, "aaaa")
                .expect_err("bare")
                .to_string()
                .contains("not written by this host")
        );
    }
}
