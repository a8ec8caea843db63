//! The two controllers, each started the way its own project starts it on a
//! cluster, with its own CRDs, the same catalog and the same identity.

use crate::cluster::{Cluster, repo};
use crate::sampler::Sampler;
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Contender {
    Karpenter,
    Ours,
}

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::Karpenter => "karpenter",
            Contender::Ours => "ours",
        }
    }
}

/// What the runs need from outside: Karpenter's build (tests/peer/build) and
/// our binary.
pub struct Builds {
    pub karpenter_dir: PathBuf,
    pub ours: PathBuf,
}

impl Builds {
    pub fn catalog(&self) -> PathBuf {
        self.karpenter_dir.join("instance_types.json")
    }
}

pub struct Running {
    child: Child,
    sampler: Option<Sampler>,
    pub log: PathBuf,
}

impl Running {
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Stops the controller after reading its CPU time.
    pub fn stop(mut self) -> crate::sampler::Usage {
        let usage = self.sampler.take().map(Sampler::finish).unwrap_or_default();
        let _ = self.child.kill();
        let _ = self.child.wait();
        usage
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs the contender's CRDs and waits until they serve.
pub fn install_crds(who: Contender, cluster: &Cluster, builds: &Builds) -> Result<()> {
    match who {
        Contender::Karpenter => {
            let crds = builds.karpenter_dir.join("crds");
            cluster.kubectl(&["apply", "--server-side", "-f", path_str(&crds)?], None)?;
        }
        Contender::Ours => {
            let crds = repo().join("charts/karpenter/crds");
            cluster.kubectl(&["apply", "--server-side", "-f", path_str(&crds)?], None)?;
            let out = Command::new(&builds.ours)
                .args(["plugin", "crd"])
                .arg(kwok_wasm()?)
                .output()
                .context("karpenter plugin crd")?;
            if !out.status.success() {
                bail!(
                    "karpenter plugin crd: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            cluster.apply(&String::from_utf8_lossy(&out.stdout))?;
        }
    }
    for crd in [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh",
    ] {
        cluster.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                &format!("crd/{crd}"),
            ],
            None,
        )?;
    }
    Ok(())
}

fn kwok_wasm() -> Result<PathBuf> {
    karpenter_test_plugins::path("kwok").context("the kwok plugin was not built")
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().context("non-UTF-8 path")
}

/// Starts the contender as the controller identity, with metrics and probes
/// on free ports and leader election off (one replica).
pub fn start(
    who: Contender,
    cluster: &Cluster,
    builds: &Builds,
    kubeconfig: &Path,
    token: &str,
    dir: &Path,
) -> Result<Running> {
    let log = dir.join(format!("{}.log", who.label()));
    let out = std::fs::File::create(&log)?;
    let mut cmd = match who {
        Contender::Karpenter => {
            let mut c = Command::new(builds.karpenter_dir.join("bin/karpenter-kwok"));
            c.env("INSTANCE_TYPES_FILE_PATH", builds.catalog())
                .env("SYSTEM_NAMESPACE", "kube-system")
                .env("DISABLE_LEADER_ELECTION", "true")
                .env("KUBERNETES_MIN_VERSION", "1.19.0-0")
                .env("METRICS_PORT", free_port()?.to_string())
                .env("HEALTH_PROBE_PORT", free_port()?.to_string())
                .env("LOG_LEVEL", "info");
            c
        }
        Contender::Ours => {
            let plugins = dir.join("plugins");
            let secrets = dir.join("secrets/kube");
            let precompiled = dir.join("precompiled");
            for d in [&plugins, &secrets, &precompiled] {
                std::fs::create_dir_all(d)?;
            }
            std::fs::copy(kwok_wasm()?, plugins.join("kwok.wasm"))?;
            let catalog = std::fs::read_to_string(builds.catalog())?;
            let config = json!({
                "allowedHosts": [cluster.endpoint],
                "secrets": ["kube/token"],
                "settings": {"INSTANCE_TYPES": catalog},
            });
            std::fs::write(plugins.join("kwok.yaml"), config.to_string())?;
            std::fs::write(secrets.join("token"), token)?;
            let mut c = Command::new(&builds.ours);
            c.args(["--log-format", "json", "controller"])
                .arg("--plugin-dir")
                .arg(&plugins)
                .arg("--secrets-dir")
                .arg(dir.join("secrets"))
                .arg("--precompiled-dir")
                .arg(&precompiled)
                .args([
                    "--cluster-name",
                    "peer",
                    "--cluster-endpoint",
                    &cluster.endpoint,
                ])
                .arg("--cluster-ca-file")
                .arg(&cluster.ca_file)
                .args(["--metrics-address", &format!("127.0.0.1:{}", free_port()?)])
                .env("DISABLE_LEADER_ELECTION", "true")
                // The chart's level, as Karpenter runs at its own default.
                .env("LOG_LEVEL", "info")
                .env_remove("POD_NAME");
            c
        }
    };
    let child = cmd
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", who.label()))?;
    let sampler = Sampler::start(child.id());
    Ok(Running {
        child,
        sampler: Some(sampler),
        log,
    })
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
