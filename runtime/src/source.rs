//! Where a plugin's WebAssembly comes from when it is not in the plugin
//! directory itself: a provider built into the controller binary (the
//! bundled ones, so the chart carries only their configuration), or, for
//! one too large for a ConfigMap (a JavaScript or Python component is
//! 10-20 MB), a file on a mounted volume (an OCI image volume, a PVC) or an
//! HTTPS URL pinned by sha256. The digest is checked before anything is
//! compiled; a mismatch is refused.
//!
//! ```yaml
//! # <name>.yaml in the plugin directory
//! source:
//!   url: https://plugins.example.com/static-inventory-0.1.0.wasm
//!   sha256: 5f2c...   # required for a URL
//! # or
//! source:
//!   volume: static-inventory.wasm   # a file under the controller's --plugin-volume
//!   sha256: 5f2c...                 # optional for a volume
//! # or
//! source:
//!   builtin: azure                  # `karpenter plugin list --builtin` names them
//! ```

use anyhow::{Context, bail, ensure};
use cap_std::fs::Dir;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The largest plugin a URL may serve.
const MAX_DOWNLOAD: usize = 256 << 20;
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Source {
    /// An HTTPS URL; `sha256` is then required.
    #[serde(default)]
    pub url: Option<String>,
    /// A file path relative to the host's plugin volume.
    #[serde(default)]
    pub volume: Option<String>,
    /// The name of a provider built into the host binary.
    #[serde(default)]
    pub builtin: Option<String>,
    /// The lower-case hex sha256 the bytes must have.
    #[serde(default)]
    pub sha256: Option<String>,
}

impl Source {
    pub fn check(&self) -> anyhow::Result<()> {
        match (&self.url, &self.volume, &self.builtin) {
            (Some(url), None, None) => {
                ensure!(
                    url.starts_with("https://"),
                    "source.url {url:?} must be an https:// URL"
                );
                ensure!(
                    self.sha256.is_some(),
                    "source.url needs sha256: the host loads only the bytes it was told to expect"
                );
            }
            (None, Some(path), None) => ensure!(
                !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|p| p == ".."),
                "source.volume {path:?} must be a relative path inside the volume"
            ),
            (None, None, Some(name)) => {
                ensure!(!name.is_empty(), "source.builtin needs a provider's name")
            }
            (None, None, None) => bail!("source: needs a url, a volume or a builtin"),
            _ => bail!("source: give one of url, volume and builtin"),
        }
        if let Some(sha) = &self.sha256 {
            ensure!(
                sha.len() == 64
                    && sha
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "source.sha256 {sha:?} is not 64 lower-case hex digits"
            );
        }
        Ok(())
    }
}

/// Providers built into the host binary, by name.
pub type Builtin = &'static [(&'static str, &'static [u8])];

/// Where a `source` may point besides a URL, as the host is started with.
#[derive(Default)]
pub struct SourceRoots {
    /// The mounted plugin volume (`--plugin-volume`), if any.
    pub volume: Option<Dir>,
    pub builtin: Builtin,
}

/// What the host reads sources with.
#[derive(Clone, Default)]
pub struct Sources {
    /// The mounted volume (`--plugin-volume`), if any.
    pub volume: Option<std::sync::Arc<Dir>>,
    /// The client for URLs: the system roots plus the host's extra roots.
    pub client: Option<reqwest::Client>,
    pub builtin: Builtin,
}

impl Sources {
    /// The plugin's bytes, verified against the pinned digest.
    pub async fn read(&self, source: &Source) -> anyhow::Result<Vec<u8>> {
        let (bytes, origin) = match (&source.url, &source.volume, &source.builtin) {
            (Some(url), _, _) => (self.download(url).await?, url.clone()),
            (None, Some(path), _) => {
                let volume = self.volume.as_ref().context(
                    "source.volume is set but the host has no plugin volume (--plugin-volume)",
                )?;
                let bytes = volume
                    .read(path)
                    .with_context(|| format!("reading {path} from the plugin volume"))?;
                (bytes, format!("volume file {path}"))
            }
            (None, None, Some(name)) => (
                self.builtin(name)?.to_vec(),
                format!("built-in plugin {name}"),
            ),
            (None, None, None) => bail!("source: needs a url, a volume or a builtin"),
        };
        if let Some(want) = &source.sha256 {
            let got = hex::encode(Sha256::digest(&bytes));
            ensure!(
                &got == want,
                "{origin} has sha256 {got}, but the configuration pins sha256 {want}: refusing to load it"
            );
        }
        Ok(bytes)
    }

    fn builtin(&self, name: &str) -> anyhow::Result<&'static [u8]> {
        if let Some((_, wasm)) = self.builtin.iter().find(|(n, _)| *n == name) {
            return Ok(wasm);
        }
        let names: Vec<&str> = self.builtin.iter().map(|(n, _)| *n).collect();
        bail!(
            "source.builtin {name:?}: this host has no built-in plugin of that name (it has: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )
    }

    async fn download(&self, url: &str) -> anyhow::Result<Vec<u8>> {
        let client = self
            .client
            .as_ref()
            .context("the host cannot download plugins (no HTTP client)")?;
        let mut response = client
            .get(url)
            .timeout(DOWNLOAD_TIMEOUT)
            .send()
            .await
            .with_context(|| format!("downloading {url}"))?;
        ensure!(
            response.status().is_success(),
            "downloading {url}: {}",
            response.status()
        );
        if let Some(len) = response.content_length() {
            ensure!(
                len as usize <= MAX_DOWNLOAD,
                "{url} is {len} bytes, over the {MAX_DOWNLOAD}-byte limit"
            );
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .with_context(|| format!("downloading {url}"))?
        {
            bytes.extend_from_slice(&chunk);
            ensure!(
                bytes.len() <= MAX_DOWNLOAD,
                "{url} is over the {MAX_DOWNLOAD}-byte limit"
            );
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(yaml: &str) -> anyhow::Result<Source> {
        let s: Source = serde_saphyr::from_str(yaml)?;
        s.check()?;
        Ok(s)
    }

    #[test]
    fn a_url_needs_https_and_a_digest() {
        let sha = "a".repeat(64);
        assert!(source(&format!("url: https://x.example/p.wasm\nsha256: {sha}")).is_ok());
        let e = source("url: https://x.example/p.wasm").expect_err("no digest");
        assert!(e.to_string().contains("needs sha256"), "{e}");
        let e = source(&format!("url: http://x.example/p.wasm\nsha256: {sha}")).expect_err("http");
        assert!(e.to_string().contains("https://"), "{e}");
        let e = source("url: https://x.example/p.wasm\nsha256: ABC").expect_err("bad digest");
        assert!(e.to_string().contains("64 lower-case hex"), "{e}");
        let e = source("volume: ../etc/passwd").expect_err("escape");
        assert!(e.to_string().contains("relative path inside"), "{e}");
        assert!(source("builtin: azure").is_ok());
        let e = source("builtin: azure\nvolume: azure.wasm").expect_err("two");
        assert!(
            e.to_string().contains("one of url, volume and builtin"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_volume_file_with_the_wrong_digest_is_refused_naming_both() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(tmp.path().join("p.wasm"), b"not wasm").expect("write");
        let volume = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).expect("dir");
        let sources = Sources {
            volume: Some(std::sync::Arc::new(volume)),
            client: None,
            builtin: &[],
        };
        let want = "0".repeat(64);
        let got = hex::encode(Sha256::digest(b"not wasm"));
        let e = sources
            .read(&Source {
                url: None,
                builtin: None,
                volume: Some("p.wasm".into()),
                sha256: Some(want.clone()),
            })
            .await
            .expect_err("mismatch");
        let e = e.to_string();
        assert!(e.contains(&want) && e.contains(&got), "{e}");
        let ok = sources
            .read(&Source {
                url: None,
                builtin: None,
                volume: Some("p.wasm".into()),
                sha256: Some(got),
            })
            .await
            .expect("match");
        assert_eq!(ok, b"not wasm");
    }
}
