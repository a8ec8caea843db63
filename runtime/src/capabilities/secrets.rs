//! Granted secrets, read through a directory capability on the host's
//! secrets directory (mounted Kubernetes Secrets: `<secret>/<key>`), never
//! through ambient paths.

use anyhow::Context;
use cap_std::fs::Dir;
use std::io::Read;

/// Secrets larger than this are refused: they are keys and tokens.
const MAX_SECRET_BYTES: u64 = 1 << 20;

pub struct SecretStore {
    root: Option<Dir>,
}

impl SecretStore {
    /// No secrets directory: every read fails.
    pub fn none() -> Self {
        SecretStore { root: None }
    }

    pub fn new(root: Dir) -> Self {
        SecretStore { root: Some(root) }
    }

    pub fn read(&self, name: &str) -> anyhow::Result<Vec<u8>> {
        let root = self
            .root
            .as_ref()
            .context("the host has no secrets directory")?;
        let file = root
            .open(name)
            .with_context(|| format!("secret {name:?}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_SECRET_BYTES + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("secret {name:?}"))?;
        anyhow::ensure!(
            bytes.len() as u64 <= MAX_SECRET_BYTES,
            "secret {name:?} is larger than 1 MiB"
        );
        Ok(bytes)
    }
}
