//! Plugins from an OCI registry, against a real one: the CNCF distribution
//! registry built from its Go module (`tests/registry/build`), serving TLS
//! with a test CA and asking for credentials (htpasswd). `karpenter plugin
//! push` publishes the Python example; a yaml naming it by digest with a pull
//! secret loads it; a wrong digest, missing credentials and a stopped
//! registry each keep the last good plugin and say why; a restart with the
//! registry down loads it from the pull cache.

use crate::common;
use crate::registry_tokens::{self, TokenServer};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use common::https::LocalCert;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::{Registry, RuntimeOptions, SourceRoots};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const USER: &str = "puller";
const PASSWORD: &str = "correct horse";

/// A distribution registry on 127.0.0.1, killed on drop.
struct LocalRegistry {
    child: Child,
    /// `127.0.0.1:PORT`
    host: String,
    dir: tempfile::TempDir,
    ca_pem: String,
}

/// How the registry asks for credentials.
enum Auth {
    /// Basic auth against an htpasswd file.
    Htpasswd,
    /// Bearer tokens from a token server, signed by `signer_pem`'s key.
    Token { realm: String, signer_pem: String },
}

impl LocalRegistry {
    fn start() -> Self {
        Self::start_with(LocalCert::new(), Auth::Htpasswd)
    }

    fn start_with(cert: LocalCert, auth: Auth) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let built = Command::new(root.join("tests/registry/build"))
            .stderr(Stdio::inherit())
            .output()
            .expect("tests/registry/build runs");
        assert!(built.status.success(), "tests/registry/build failed");
        let binary = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());

        let dir = tempfile::tempdir().expect("tmp");
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
        write("chain.pem", &cert.chain_pem).expect("chain");
        write("key.pem", &cert.key_pem).expect("key");
        let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt");
        write("htpasswd", &format!("{USER}:{hash}\n")).expect("htpasswd");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let host = format!("127.0.0.1:{port}");
        let d = dir.path().display();
        let auth = match auth {
            Auth::Htpasswd => format!("htpasswd: {{realm: plugins, path: {d}/htpasswd}}"),
            Auth::Token { realm, signer_pem } => {
                write("token-signer.pem", &signer_pem).expect("signer");
                format!(
                    "token: {{realm: \"{realm}\", service: {}, issuer: {}, rootcertbundle: {d}/token-signer.pem}}",
                    registry_tokens::SERVICE,
                    registry_tokens::ISSUER
                )
            }
        };
        write(
            "config.yml",
            &format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {d}/data}}}}\n\
                 http: {{addr: \"{host}\", tls: {{certificate: {d}/chain.pem, key: {d}/key.pem}}}}\n\
                 auth: {{{auth}}}\n"
            ),
        )
        .expect("config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log");
        let child = Command::new(binary)
            .args(["serve", &format!("{d}/config.yml")])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("the registry starts");
        let registry = LocalRegistry {
            child,
            host,
            dir,
            ca_pem: cert.ca_pem,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(&registry.host).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen: {}",
                registry.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("registry.log")).unwrap_or_default()
    }

    /// A Docker config JSON with the registry's credentials, as a
    /// `kubernetes.io/dockerconfigjson` Secret holds it.
    fn docker_config(&self) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
        format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, self.host)
    }

    /// `karpenter plugin push`; returns its stdout, stderr and success.
    fn push(&self, wasm: &Path, repository: &str, auth: bool) -> (String, String, bool) {
        std::fs::write(self.path("ca.pem"), &self.ca_pem).expect("ca");
        std::fs::write(self.path("auth.json"), self.docker_config()).expect("auth");
        let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter"));
        command
            .args(["plugin", "push"])
            .arg(wasm)
            .arg(format!("{}/{repository}", self.host))
            .arg("--ca-file")
            .arg(self.path("ca.pem"))
            .env_remove("REGISTRY_AUTH_FILE");
        if auth {
            command.arg("--auth-file").arg(self.path("auth.json"));
        }
        let out = command.output().expect("karpenter runs");
        (
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.success(),
        )
    }

    /// The Python example as `plugins` loaded it from this registry.
    fn loaded(&self, plugins: &Registry) -> std::sync::Arc<karpenter_runtime::Plugin> {
        plugins.get("inventory").unwrap_or_else(|| {
            panic!(
                "not loaded: {:?}\nregistry log:\n{}",
                plugins.failures(),
                self.log()
            )
        })
    }

    /// The Python example pushed as `plugins/inventory:0.1.0`, after an
    /// anonymous push was refused: its bytes, its pinned reference and what
    /// the push said.
    fn push_python(&self) -> (Vec<u8>, String, String) {
        let python = common::plugin_path("inventory");
        let wasm = std::fs::read(&python)
            .unwrap_or_else(|e| panic!("{}: {e} (`make py-plugins` builds it)", python.display()));
        let (_, why, ok) = self.push(&python, "plugins/inventory:0.1.0", false);
        assert!(!ok, "an anonymous push was accepted");
        assert!(why.contains("pushing to"), "{why}");
        let (pinned, told, ok) = self.push(&python, "plugins/inventory:0.1.0", true);
        assert!(ok, "push failed: {told}\nregistry log:\n{}", self.log());
        (wasm, pinned, told)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn open(path: &Path) -> Dir {
    Dir::open_ambient_dir(path, ambient_authority()).expect("open dir")
}

/// A controller's view: the plugin directory, a secrets directory with the
/// pull secret, the registry's CA trusted, and a pull cache.
struct Host {
    plugins: tempfile::TempDir,
    secrets: tempfile::TempDir,
    pulled: tempfile::TempDir,
    ca_pem: String,
}

impl Host {
    fn new(registry: &LocalRegistry) -> Self {
        let host = Host {
            plugins: tempfile::tempdir().expect("tmp"),
            secrets: tempfile::tempdir().expect("tmp"),
            pulled: tempfile::tempdir().expect("tmp"),
            ca_pem: registry.ca_pem.clone(),
        };
        let regcred = host.secrets.path().join("regcred");
        std::fs::create_dir(&regcred).expect("mkdir");
        std::fs::write(regcred.join(".dockerconfigjson"), registry.docker_config()).expect("write");
        host
    }

    /// `inventory.yaml`: the example's settings, its WebAssembly from `oci`.
    fn configure(&self, oci: &str, pull_secret: bool) {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/plugins/inventory/inventory.yaml");
        let settings = std::fs::read_to_string(example).expect("example yaml");
        let secret = if pull_secret {
            "\n  pullSecret: regcred"
        } else {
            ""
        };
        std::fs::write(
            self.plugins.path().join("inventory.yaml"),
            format!("source:\n  oci: {oci}{secret}\n{settings}"),
        )
        .expect("write");
    }

    async fn registry(&self) -> std::sync::Arc<Registry> {
        let runtime = common::runtime_with(RuntimeOptions {
            extra_roots: vec![self.ca_pem.clone().into_bytes()],
            secrets: SecretStore::new(open(self.secrets.path())),
            ..RuntimeOptions::default()
        });
        Registry::open_with(
            runtime,
            open(self.plugins.path()),
            SourceRoots {
                pulled: Some(open(self.pulled.path())),
                ..SourceRoots::default()
            },
        )
        .await
        .expect("registry")
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_plugin_loads_by_digest_and_outlives_its_registry() {
    let mut registry = LocalRegistry::start();
    let (wasm, pinned, told) = registry.push_python();
    let prefix = format!("{}/plugins/inventory:0.1.0@sha256:", registry.host);
    assert!(pinned.starts_with(&prefix), "{pinned}");
    assert!(told.contains(&format!("oci: {pinned}")), "{told}");

    let host = Host::new(&registry);
    host.configure(&pinned, true);
    let plugins = host.registry().await;
    let loaded = registry.loaded(&plugins);
    assert_eq!(loaded.metadata.name, "inventory");
    assert_eq!(loaded.sha256, hex::encode(Sha256::digest(&wasm)));
    let metadata = loaded
        .metadata_call()
        .await
        .expect("the pulled plugin answers");
    assert_eq!(metadata.name, "inventory");

    // A digest the registry does not hold: refused, the loaded one kept.
    let absent = format!("{}sha256:{}", &prefix[..prefix.len() - 7], "0".repeat(64));
    host.configure(&absent, true);
    let report = plugins.reload().await.expect("reload");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let why = &plugins.failures()["inventory"];
    assert!(why.contains(&format!("pulling {absent}")), "{why}");
    assert!(why.to_lowercase().contains("manifest unknown"), "{why}");
    assert_eq!(
        plugins.get("inventory").expect("kept").sha256,
        loaded.sha256
    );

    // The kwok plugin pushed too, then asked for without the pull secret.
    let (kwok, told, ok) = registry.push(&common::plugin_path("kwok"), "plugins/kwok:1", true);
    assert!(ok, "push failed: {told}");
    host.configure(&kwok, false);
    plugins.reload().await.expect("reload");
    let why = &plugins.failures()["inventory"];
    assert!(
        why.contains("anonymously (no source.pullSecret)") && why.contains("Not authorized"),
        "{why}"
    );
    assert_eq!(
        plugins.get("inventory").expect("kept").sha256,
        loaded.sha256
    );

    // The registry gone: the last good plugin stays, and the error names it.
    registry.stop();
    host.configure(&kwok, true);
    plugins.reload().await.expect("reload");
    let why = plugins.failures()["inventory"].clone();
    assert!(why.contains(&format!("pulling {kwok}")), "{why}");
    assert_eq!(
        plugins.get("inventory").expect("kept").sha256,
        loaded.sha256
    );
    eprintln!("with the registry down: {why}");

    // A restart with the registry still down loads the first digest from
    // the pull cache.
    host.configure(&pinned, true);
    let restarted = host.registry().await;
    let from_cache = restarted
        .get("inventory")
        .unwrap_or_else(|| panic!("not loaded: {:?}", restarted.failures()));
    assert_eq!(from_cache.sha256, loaded.sha256);
}

/// Most registries (Docker Hub, GHCR, Harbor) take no basic auth on their
/// API: they hand out bearer tokens from a token server. The push's
/// credentials and the pull secret go through that flow, and an anonymous
/// pull gets a token that grants nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_hands_out_bearer_tokens_takes_the_push_and_the_pull_secret() {
    let cert = LocalCert::new();
    let tokens = TokenServer::start(&cert, USER, PASSWORD).await;
    let registry = LocalRegistry::start_with(
        cert,
        Auth::Token {
            realm: tokens.realm.clone(),
            signer_pem: tokens.signer_pem.clone(),
        },
    );
    let (wasm, pinned, _) = registry.push_python();
    let granted = |user: Option<&str>, scope: &str| {
        tokens
            .issued()
            .iter()
            .any(|t| t.user.as_deref() == user && t.scopes.iter().any(|s| s.contains(scope)))
    };
    assert!(
        granted(Some(USER), "repository:plugins/inventory:pull,push"),
        "{:?}",
        tokens.issued()
    );

    let host = Host::new(&registry);
    host.configure(&pinned, true);
    let plugins = host.registry().await;
    let loaded = registry.loaded(&plugins);
    assert_eq!(loaded.sha256, hex::encode(Sha256::digest(&wasm)));
    let pulled_with_token = tokens.issued().iter().any(|t| {
        t.user.as_deref() == Some(USER) && t.scopes == ["repository:plugins/inventory:pull"]
    });
    assert!(pulled_with_token, "{:?}", tokens.issued());

    // Without the pull secret the token grants nothing, and the registry
    // refuses the pull.
    let (kwok, told, ok) = registry.push(&common::plugin_path("kwok"), "plugins/kwok:1", true);
    assert!(ok, "push failed: {told}");
    host.configure(&kwok, false);
    plugins.reload().await.expect("reload");
    let why = &plugins.failures()["inventory"];
    assert!(why.contains("anonymously (no source.pullSecret)"), "{why}");
    assert!(
        granted(None, "repository:plugins/kwok:pull"),
        "{:?}",
        tokens.issued()
    );
    assert_eq!(
        plugins.get("inventory").expect("kept").sha256,
        loaded.sha256
    );
    eprintln!("anonymous pull: {why}");
}
