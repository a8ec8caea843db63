//! Where a plugin's WebAssembly comes from when it is not in the plugin
//! directory itself: a provider built into the controller binary (the
//! bundled ones, so the chart carries only their configuration), or, for
//! one too large for a ConfigMap (a JavaScript or Python component is
//! 10-20 MB), an OCI artifact in a registry pinned by digest (see `oci.rs`),
//! a file on a mounted volume (an OCI image volume, a PVC) or an HTTPS URL
//! pinned by sha256. The digest is checked before anything is compiled; a
//! mismatch is refused.
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
//! # or
//! source:
//!   oci: registry.example.com/plugins/inventory:0.1.0@sha256:5f2c...
//!   pullSecret: regcred             # optional: <secrets dir>/regcred/.dockerconfigjson
//! ```

use super::capabilities::secrets::SecretStore;
use super::oci::{self, PullCache, Registries};
use anyhow::{Context, bail, ensure};
use cap_std::fs::Dir;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;

/// The largest plugin a URL may serve.
const MAX_DOWNLOAD: usize = 256 << 20;
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
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
    /// An OCI artifact pinned by its manifest's digest:
    /// `registry/repository[:tag]@sha256:<hex>`.
    #[serde(default)]
    pub oci: Option<String>,
    /// For `oci`: a Secret under the host's secrets directory holding a
    /// `.dockerconfigjson`, granted to the plugin loader (never to the
    /// plugin) to pull with.
    #[serde(default)]
    pub pull_secret: Option<String>,
    /// The lower-case hex sha256 the bytes must have.
    #[serde(default)]
    pub sha256: Option<String>,
}

/// The one place a `Source` points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    Url(&'a str),
    Volume(&'a str),
    Builtin(&'a str),
    Oci(&'a str),
}

impl Source {
    pub fn origin(&self) -> anyhow::Result<Origin<'_>> {
        let given = [
            self.url.as_deref().map(Origin::Url),
            self.volume.as_deref().map(Origin::Volume),
            self.builtin.as_deref().map(Origin::Builtin),
            self.oci.as_deref().map(Origin::Oci),
        ];
        let mut given = given.into_iter().flatten();
        match (given.next(), given.next()) {
            (Some(origin), None) => Ok(origin),
            (None, _) => bail!("source: needs a url, a volume, a builtin or an oci reference"),
            (Some(_), Some(_)) => bail!("source: give one of url, volume, builtin and oci"),
        }
    }

    /// Whether it is fetched over the network, and so worth retrying.
    pub fn is_remote(&self) -> bool {
        matches!(self.origin(), Ok(Origin::Url(_) | Origin::Oci(_)))
    }

    pub fn check(&self) -> anyhow::Result<()> {
        match self.origin()? {
            Origin::Url(url) => {
                ensure!(
                    url.starts_with("https://"),
                    "source.url {url:?} must be an https:// URL"
                );
                ensure!(
                    self.sha256.is_some(),
                    "source.url needs sha256: the host loads only the bytes it was told to expect"
                );
            }
            Origin::Volume(path) => ensure!(
                !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|p| p == ".."),
                "source.volume {path:?} must be a relative path inside the volume"
            ),
            Origin::Builtin(name) => {
                ensure!(!name.is_empty(), "source.builtin needs a provider's name")
            }
            Origin::Oci(reference) => {
                oci::pinned(reference)?;
            }
        }
        if let Some(secret) = &self.pull_secret {
            ensure!(self.oci.is_some(), "source.pullSecret is for an oci source");
            ensure!(
                !secret.is_empty() && !secret.contains('/') && secret != "." && secret != "..",
                "source.pullSecret {secret:?} must be a Secret's name"
            );
        }
        if let Some(sha) = &self.sha256 {
            ensure!(
                oci::is_sha256_hex(sha),
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
    /// Where components pulled from registries are kept, by digest.
    pub pulled: Option<Dir>,
}

/// What the host reads sources with.
#[derive(Clone, Default)]
pub struct Sources {
    /// The mounted volume (`--plugin-volume`), if any.
    pub volume: Option<std::sync::Arc<Dir>>,
    /// The client for URLs: the system roots plus the host's extra roots.
    pub client: Option<reqwest::Client>,
    pub builtin: Builtin,
    pub registries: Option<Arc<Registries>>,
    /// Where pull secrets are read from.
    pub secrets: Option<Arc<SecretStore>>,
    pub pulled: Option<Arc<PullCache>>,
}

impl Sources {
    /// The plugin's bytes, verified against the pinned digest.
    pub async fn read(&self, source: &Source) -> anyhow::Result<Vec<u8>> {
        let (bytes, origin) = match source.origin()? {
            Origin::Url(url) => (self.download(url).await?, url.to_string()),
            Origin::Volume(path) => {
                let volume = self.volume.as_ref().context(
                    "source.volume is set but the host has no plugin volume (--plugin-volume)",
                )?;
                let bytes = volume
                    .read(path)
                    .with_context(|| format!("reading {path} from the plugin volume"))?;
                (bytes, format!("volume file {path}"))
            }
            Origin::Builtin(name) => (
                self.builtin(name)?.to_vec(),
                format!("built-in plugin {name}"),
            ),
            Origin::Oci(reference) => (
                self.pull(reference, source.pull_secret.as_deref())
                    .await
                    .with_context(|| format!("pulling {reference}"))?,
                format!("OCI artifact {reference}"),
            ),
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

    /// From the pull cache, or else the registry; verified either way.
    async fn pull(&self, text: &str, pull_secret: Option<&str>) -> anyhow::Result<Vec<u8>> {
        let reference = oci::pinned(text)?;
        let digest = reference.digest().unwrap_or_default();
        if let Some(wasm) = self.pulled.as_ref().and_then(|c| c.get(digest)) {
            return Ok(wasm);
        }
        let registries = self
            .registries
            .as_ref()
            .context("the host cannot pull plugins (no registry client)")?;
        let auth = match pull_secret {
            None => RegistryAuth::Anonymous,
            Some(secret) => {
                let file = format!("{secret}/.dockerconfigjson");
                let config = self
                    .secrets
                    .as_ref()
                    .context("the host has no secrets directory for the pull secret")?
                    .read(&file)
                    .with_context(|| format!("reading pull secret {secret}"))?;
                oci::auth_for(&config, reference.resolve_registry())
                    .with_context(|| format!("pull secret {secret}"))?
            }
        };
        let (wasm, manifest) = registries
            .pull(&reference, &auth, MAX_DOWNLOAD)
            .await
            .with_context(|| match pull_secret {
                Some(secret) => format!("with pull secret {secret}"),
                None => "anonymously (no source.pullSecret)".to_string(),
            })?;
        if let Some(cache) = &self.pulled {
            cache.put(&manifest, &wasm);
        }
        Ok(wasm)
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
        let digest = format!("sha256:{sha}");
        assert!(
            source(&format!(
                "oci: r.example.com/p/inventory:1@{digest}\npullSecret: regcred"
            ))
            .is_ok()
        );
        let e = source("oci: r.example.com/p/inventory:1").expect_err("tag alone");
        assert!(e.to_string().contains("names no digest"), "{e}");
        let e = source("builtin: azure\npullSecret: regcred").expect_err("secret without oci");
        assert!(e.to_string().contains("for an oci source"), "{e}");
        let e =
            source(&format!("oci: r.example.com/p@{digest}\npullSecret: ../x")).expect_err("path");
        assert!(e.to_string().contains("a Secret's name"), "{e}");
        let e = source("builtin: azure\nvolume: azure.wasm").expect_err("two");
        assert!(
            e.to_string()
                .contains("one of url, volume, builtin and oci"),
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
            ..Sources::default()
        };
        let want = "0".repeat(64);
        let got = hex::encode(Sha256::digest(b"not wasm"));
        let e = sources
            .read(&Source {
                volume: Some("p.wasm".into()),
                sha256: Some(want.clone()),
                ..Source::default()
            })
            .await
            .expect_err("mismatch");
        let e = e.to_string();
        assert!(e.contains(&want) && e.contains(&got), "{e}");
        let ok = sources
            .read(&Source {
                volume: Some("p.wasm".into()),
                sha256: Some(got),
                ..Source::default()
            })
            .await
            .expect("match");
        assert_eq!(ok, b"not wasm");
    }
}
