//! `karpenter plugin push`: publishes a plugin to an OCI registry as a
//! WebAssembly artifact and prints the digest-pinned reference that a
//! plugin's `source: {oci: ...}` names.

use super::files;
use super::plugin::load_file;
use anyhow::Context;
use clap::Args;
use karpenter_runtime::inspect;
use karpenter_runtime::oci::{self, Registries};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The plugin: a `.wasm` component. It is loaded first, so only a
    /// provider this host can run is published.
    pub file: PathBuf,
    /// Where to publish it: `registry/repository[:tag]`.
    pub reference: String,
    /// Credentials: a Docker config JSON (`~/.docker/config.json`, or a pull
    /// secret's `.dockerconfigjson`); anonymous when omitted.
    #[arg(long, env = "REGISTRY_AUTH_FILE")]
    pub auth_file: Option<PathBuf>,
    /// PEM CA bundle trusted besides the system roots: a private registry's.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
}

pub async fn run(args: PushArgs) -> anyhow::Result<ExitCode> {
    let reference = oci::reference(&args.reference)?;
    anyhow::ensure!(
        reference.digest().is_none(),
        "{}: push to a tag (or a repository); the digest is what the push returns",
        args.reference
    );
    let (_, plugin) = load_file(&args.file, None)
        .await
        .with_context(|| format!("{} is not a plugin this host can load", args.file.display()))?;
    // The artifact holds the component itself, never its compressed file.
    let (_, wasm) = files::read_plugin(&args.file)?;
    let config = artifact_config(
        &wasm,
        inspect::exports(&plugin.component()),
        inspect::imports(&plugin.component()),
    )?;
    let auth = match &args.auth_file {
        Some(path) => oci::auth_for(&files::read(path)?, reference.resolve_registry())
            .with_context(|| path.display().to_string())?,
        None => oci::RegistryAuth::Anonymous,
    };
    let roots = match &args.ca_file {
        Some(path) => vec![files::read(path)?],
        None => vec![],
    };
    let digest = Registries::new(&roots)
        .push(&reference, &wasm, &config, &auth)
        .await
        .with_context(|| format!("pushing to {}", args.reference))?;
    eprintln!(
        "pushed plugin {} ({} bytes, karpenter:provider@{}); a plugin's yaml names it as:\nsource:\n  oci: {}@{digest}",
        plugin.metadata.name,
        wasm.len(),
        plugin.contract_version,
        args.reference
    );
    outln!("{}@{digest}", args.reference);
    Ok(ExitCode::SUCCESS)
}

/// The artifact's config, as the Wasm OCI artifact convention lays it out.
/// `created` is `SOURCE_DATE_EPOCH` when set, so a reproducible build
/// publishes the same digest each time.
fn artifact_config(
    wasm: &[u8],
    exports: Vec<String>,
    imports: Vec<String>,
) -> anyhow::Result<Vec<u8>> {
    let created = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(secs) => jiff::Timestamp::from_second(
            secs.trim()
                .parse()
                .context("SOURCE_DATE_EPOCH is not a number of seconds")?,
        )?,
        Err(_) => jiff::Timestamp::now(),
    };
    let config = serde_json::json!({
        "created": created.to_string(),
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [format!("sha256:{}", hex::encode(Sha256::digest(wasm)))],
        "component": {"exports": exports, "imports": imports},
    });
    Ok(serde_json::to_vec(&config)?)
}
