//! Plugins published to OCI registries as WebAssembly artifacts, in the
//! layout the CNCF Wasm OCI artifact convention gives them: an OCI image
//! manifest whose config has media type `application/vnd.wasm.config.v0+json`
//! and whose one layer, `application/wasm`, is the component itself.
//!
//! A source names the manifest by digest, so what is loaded is fixed by the
//! operator's configuration, never by a tag someone moved. The manifest's
//! bytes are checked against that digest and the layer's against the
//! manifest's before anything is compiled, and both are kept on disk by
//! digest, so a restart needs no registry.

use anyhow::{Context, bail, ensure};
use base64::Engine as _;
use cap_std::fs::Dir;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};
pub use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::AsyncWrite;

pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// A reference that names its registry and pins a sha256 manifest digest:
/// `registry/repository[:tag]@sha256:<hex>`.
pub fn pinned(text: &str) -> anyhow::Result<Reference> {
    let reference = reference(text)?;
    let Some(digest) = reference.digest() else {
        bail!(
            "source.oci {text:?} names no digest: pin it as registry/repository@sha256:<hex> (a tag may stand before the digest; `karpenter plugin push` prints the pinned reference)"
        );
    };
    ensure!(
        digest.strip_prefix("sha256:").is_some_and(is_sha256_hex),
        "source.oci {text:?}: only sha256 digests are accepted"
    );
    Ok(reference)
}

/// A reference that names its registry; without one, OCI tools would
/// quietly mean Docker Hub.
pub fn reference(text: &str) -> anyhow::Result<Reference> {
    let first = text.split('/').next().unwrap_or_default();
    ensure!(
        text.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost"),
        "{text:?} must start with its registry's host, e.g. registry.example.com/plugins/name"
    );
    text.parse()
        .with_context(|| format!("{text:?} is not an OCI reference"))
}

/// 64 lower-case hex digits: how a sha256 is written in pins and digests.
pub(super) fn is_sha256_hex(hex: &str) -> bool {
    hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The credentials for `registry` in a `kubernetes.io/dockerconfigjson`
/// Secret's `.dockerconfigjson` (or the older `.dockercfg` map); anonymous
/// when it has none for that registry.
pub fn auth_for(docker_config: &[u8], registry: &str) -> anyhow::Result<RegistryAuth> {
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        auth: Option<String>,
        #[serde(default)]
        username: Option<String>,
        #[serde(default)]
        password: Option<String>,
    }
    let json: serde_json::Value =
        serde_json::from_slice(docker_config).context("the pull secret is not JSON")?;
    let auths = json.get("auths").unwrap_or(&json);
    let serde_json::Value::Object(auths) = auths else {
        bail!("the pull secret has no \"auths\" map");
    };
    let host = |key: &str| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next().unwrap_or_default().to_string()
    };
    let same = |key: &str| {
        let key = host(key);
        key == registry
            || (registry == "index.docker.io"
                && (key == "docker.io" || key == "registry-1.docker.io"))
    };
    let Some((key, entry)) = auths.iter().find(|(key, _)| same(key)) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let entry: Entry = serde_json::from_value(entry.clone())
        .with_context(|| format!("the pull secret's entry for {key}"))?;
    if let (Some(user), Some(password)) = (entry.username, entry.password) {
        return Ok(RegistryAuth::Basic(user, password));
    }
    let encoded = entry
        .auth
        .with_context(|| format!("the pull secret's entry for {key} has no auth"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .with_context(|| format!("the pull secret's auth for {key} is not base64"))?;
    let decoded = String::from_utf8(decoded)
        .with_context(|| format!("the pull secret's auth for {key} is not text"))?;
    let Some((user, password)) = decoded.split_once(':') else {
        bail!("the pull secret's auth for {key} is not user:password");
    };
    Ok(RegistryAuth::Basic(user.into(), password.into()))
}

/// OCI distribution clients for plugins: HTTPS only, bounded waits.
pub struct Registries {
    extra_roots: Vec<Vec<u8>>,
}

impl Registries {
    /// `extra_roots`: PEM bundles trusted besides the system roots.
    pub fn new(extra_roots: &[Vec<u8>]) -> Self {
        Registries {
            extra_roots: extra_roots.to_vec(),
        }
    }

    /// A client for one pull or push. Clients keep the first credentials
    /// and tokens they get per registry, so a shared one would pull one
    /// plugin with another's pull secret.
    fn client(&self) -> Client {
        Client::new(ClientConfig {
            protocol: ClientProtocol::Https,
            extra_root_certificates: self
                .extra_roots
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            ..ClientConfig::default()
        })
    }

    /// The component `reference` (pinned by digest) names, at most `max`
    /// bytes, verified. Returns the manifest's bytes too, for the cache.
    pub async fn pull(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        max: usize,
    ) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let want = reference
            .digest()
            .context("the reference names no digest")?;
        let client = self.client();
        let (manifest_bytes, _) = client
            .pull_manifest_raw(reference, auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(anyhow::Error::from)
            .context("fetching the manifest")?;
        let got = sha256(&manifest_bytes);
        ensure!(
            got == want,
            "the registry served a manifest with digest {got} for {want}: refusing it"
        );
        let layer = wasm_layer(&manifest_bytes)?;
        ensure!(
            usize::try_from(layer.size).is_ok_and(|size| size <= max),
            "its component is {} bytes, over the {max}-byte limit",
            layer.size
        );
        let mut wasm = Bounded {
            bytes: Vec::new(),
            max,
        };
        client
            .pull_blob(reference, &layer, &mut wasm)
            .await
            .map_err(anyhow::Error::from)
            .with_context(|| format!("fetching its component, layer {}", layer.digest))?;
        // pull_blob checked the digest; the size is the manifest's word too.
        ensure!(
            wasm.bytes.len() as i64 == layer.size,
            "its component layer is {} bytes, but the manifest says {}",
            wasm.bytes.len(),
            layer.size
        );
        Ok((wasm.bytes, manifest_bytes))
    }

    /// Publishes `wasm` under `reference` (a tag, or none) and returns the
    /// manifest's digest. `config` is the artifact's config JSON.
    pub async fn push(
        &self,
        reference: &Reference,
        wasm: &[u8],
        config: &[u8],
        auth: &RegistryAuth,
    ) -> anyhow::Result<String> {
        let layer = OciDescriptor {
            media_type: LAYER_MEDIA_TYPE.into(),
            digest: sha256(wasm),
            size: wasm.len() as i64,
            ..OciDescriptor::default()
        };
        let config_descriptor = OciDescriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: sha256(config),
            size: config.len() as i64,
            ..OciDescriptor::default()
        };
        let manifest = OciImageManifest {
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
            config: config_descriptor.clone(),
            layers: vec![layer.clone()],
            ..OciImageManifest::default()
        };
        let client = self.client();
        client
            .store_auth_if_needed(reference.resolve_registry(), auth)
            .await;
        for (bytes, descriptor) in [(wasm, &layer), (config, &config_descriptor)] {
            client
                .push_blob(reference, bytes, &descriptor.digest)
                .await
                .map_err(anyhow::Error::from)
                .with_context(|| format!("uploading blob {}", descriptor.digest))?;
        }
        let body = serde_json::to_vec(&manifest)?;
        let digest = sha256(&body);
        client
            .push_manifest_raw(reference, body, OCI_IMAGE_MEDIA_TYPE.parse()?)
            .await
            .map_err(anyhow::Error::from)
            .context("uploading the manifest")?;
        Ok(digest)
    }
}

/// The one `application/wasm` layer of a Wasm artifact's manifest.
fn wasm_layer(manifest: &[u8]) -> anyhow::Result<OciDescriptor> {
    let manifest: OciImageManifest =
        serde_json::from_slice(manifest).context("the manifest is not an OCI image manifest")?;
    ensure!(
        manifest.config.media_type == CONFIG_MEDIA_TYPE,
        "it is not a WebAssembly artifact: its config is {:?}, not {CONFIG_MEDIA_TYPE}",
        manifest.config.media_type
    );
    let mut wasm = manifest
        .layers
        .into_iter()
        .filter(|l| l.media_type == LAYER_MEDIA_TYPE);
    match (wasm.next(), wasm.next()) {
        (Some(layer), None) => Ok(layer),
        (None, _) => bail!("it has no {LAYER_MEDIA_TYPE} layer"),
        (Some(_), Some(_)) => bail!("it has several {LAYER_MEDIA_TYPE} layers; a plugin is one"),
    }
}

/// Pulled artifacts by digest, each file checked against its name when read:
/// `<manifest hex>.json` and `<layer hex>.wasm`.
pub struct PullCache {
    dir: Dir,
}

impl PullCache {
    pub fn new(dir: Dir) -> Self {
        PullCache { dir }
    }

    /// The component the manifest `digest` names, if both are stored intact.
    pub fn get(&self, digest: &str) -> Option<Vec<u8>> {
        let manifest = self.verified(digest, "json")?;
        let layer = wasm_layer(&manifest).ok()?;
        self.verified(&layer.digest, "wasm")
    }

    fn verified(&self, digest: &str, ext: &str) -> Option<Vec<u8>> {
        let hex = digest.strip_prefix("sha256:")?;
        let file = format!("{hex}.{ext}");
        let bytes = self.dir.read(&file).ok()?;
        if sha256(&bytes) == digest {
            return Some(bytes);
        }
        tracing::warn!(file, "discarding a damaged cached plugin download");
        let _ = self.dir.remove_file(&file);
        None
    }

    /// Stores a pulled artifact. A failure costs only a later pull.
    pub fn put(&self, manifest: &[u8], wasm: &[u8]) {
        for (bytes, ext) in [(wasm, "wasm"), (manifest, "json")] {
            let file = format!("{}.{ext}", hex::encode(Sha256::digest(bytes)));
            let tmp = format!("{file}.tmp");
            let stored = self
                .dir
                .write(&tmp, bytes)
                .and_then(|()| self.dir.rename(&tmp, &self.dir, &file));
            if let Err(e) = stored {
                tracing::warn!(file, error = %e, "cannot cache a pulled plugin");
                return;
            }
        }
    }
}

/// A writer that refuses to grow past `max` bytes: a registry that streams
/// more than it declared is cut off, not buffered.
struct Bounded {
    bytes: Vec<u8>,
    max: usize,
}

impl AsyncWrite for Bounded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.max {
            return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                "over the {}-byte limit",
                self.max
            ))));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_must_name_its_registry_and_pin_a_digest() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let r = pinned(&format!("registry.example.com/plugins/inventory@{digest}")).expect("ok");
        assert_eq!(r.digest(), Some(digest.as_str()));
        let r = pinned(&format!("127.0.0.1:5000/plugins/inventory:0.1.0@{digest}")).expect("ok");
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.tag(), Some("0.1.0"));
        let e = pinned("registry.example.com/plugins/inventory:0.1.0").expect_err("tag alone");
        assert!(e.to_string().contains("names no digest"), "{e}");
        let e = pinned(&format!("plugins/inventory@{digest}")).expect_err("no registry");
        assert!(e.to_string().contains("registry's host"), "{e}");
        let e = pinned("registry.example.com/p@sha512:abc").expect_err("sha512");
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn a_pull_secret_gives_the_registrys_credentials_or_none() {
        let auth = base64::engine::general_purpose::STANDARD.encode("puller:s3cret");
        let config = format!(
            r#"{{"auths": {{"https://registry.example.com/v1/": {{"auth": "{auth}"}}, "other.example.com": {{"username": "u", "password": "p"}}}}}}"#
        );
        let got = |registry| auth_for(config.as_bytes(), registry).expect("parses");
        assert!(
            matches!(got("registry.example.com"), RegistryAuth::Basic(u, p) if u == "puller" && p == "s3cret")
        );
        assert!(matches!(got("other.example.com"), RegistryAuth::Basic(u, _) if u == "u"));
        assert!(matches!(got("third.example.com"), RegistryAuth::Anonymous));
        let e = auth_for(
            br#"{"auths": {"r.example.com": {"auth": "bm9jb2xvbg=="}}}"#,
            "r.example.com",
        )
        .expect_err("no colon");
        assert!(e.to_string().contains("user:password"), "{e}");
    }

    #[test]
    fn the_cache_serves_only_what_matches_its_digests() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = || Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).expect("dir");
        let cache = PullCache::new(dir());
        let wasm = b"\0asm component".to_vec();
        let manifest = serde_json::to_vec(&OciImageManifest {
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.into()),
            config: OciDescriptor {
                media_type: CONFIG_MEDIA_TYPE.into(),
                ..OciDescriptor::default()
            },
            layers: vec![OciDescriptor {
                media_type: LAYER_MEDIA_TYPE.into(),
                digest: sha256(&wasm),
                size: wasm.len() as i64,
                ..OciDescriptor::default()
            }],
            ..OciImageManifest::default()
        })
        .expect("json");
        let digest = sha256(&manifest);
        assert_eq!(cache.get(&digest), None);
        cache.put(&manifest, &wasm);
        assert_eq!(cache.get(&digest), Some(wasm.clone()));
        // A damaged layer is discarded, not served.
        let layer_file = format!("{}.wasm", hex::encode(Sha256::digest(&wasm)));
        dir().write(&layer_file, b"tampered").expect("write");
        assert_eq!(cache.get(&digest), None);
        assert!(!dir().exists(&layer_file));
    }
}
