//! `karpenter plugin test`: the conformance kit against one plugin file.

use super::files;
use crate::conformance;
use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::Args;
use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::capabilities::tokens;
use karpenter_runtime::{PluginConfig, Runtime, RuntimeOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct TestArgs {
    pub file: PathBuf,
    /// The NodeClass object to test with (YAML or JSON); an empty one of the
    /// plugin's default kind when omitted.
    #[arg(long)]
    pub node_class: Option<PathBuf>,
    /// The endpoint the provider's backend answers at (a cluster's API server,
    /// an emulator): given to the plugin as the cluster endpoint and added to
    /// its allowed hosts.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// PEM CA bundle to trust for the endpoint, also given to the plugin as
    /// the cluster's CA.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// The plugin's configuration; `<file>.yaml` beside the plugin when omitted.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Secrets the plugin may be granted, as `<secret>/<key>` files.
    #[arg(long)]
    pub secrets_dir: Option<PathBuf>,
    /// How long a deleted instance may take to answer not-found.
    #[arg(long, default_value = "60")]
    pub delete_timeout_seconds: u64,
    #[arg(long, value_enum, default_value_t = super::Output::Table)]
    pub output: super::Output,
}

pub async fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let wasm = files::read(&args.file)?;
    let name = args
        .file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let mut config = read_config(&args.file, args.config.as_deref())?;
    let ca = match &args.ca_file {
        Some(p) => files::read_to_string(p)?,
        None => String::new(),
    };
    if let Some(endpoint) = &args.endpoint {
        let origin = origin(endpoint)?;
        if !config.allowed_hosts.contains(&origin) {
            config.allowed_hosts.push(origin);
        }
    }
    let runtime = Runtime::new(RuntimeOptions {
        precompiled: files::precompiled_dir(),
        secrets: match &args.secrets_dir {
            Some(p) => SecretStore::new(
                Dir::open_ambient_dir(p, ambient_authority())
                    .with_context(|| format!("opening {}", p.display()))?,
            ),
            None => SecretStore::none(),
        },
        cluster: Arc::new(ClusterView::new(
            "conformance",
            args.endpoint.as_deref().unwrap_or_default(),
            &ca,
        )),
        tokens: tokens::from_environment(&[])?,
        ..RuntimeOptions::default()
    })?;
    let report_of = |report: &conformance::Report| -> anyhow::Result<ExitCode> {
        match args.output {
            super::Output::Json => super::print(&serde_json::to_string_pretty(report)?),
            super::Output::Table => super::print(&report.to_string()),
        }
        Ok(if report.passed() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    };
    let plugin = match runtime.load(&name, &wasm, config).await {
        Ok(plugin) => plugin,
        Err(e) => match e.downcast_ref::<karpenter_runtime::InvalidMetadata>() {
            Some(invalid) => return report_of(&conformance::unloadable(&invalid.0)),
            None => return Err(e),
        },
    };
    let options = conformance::Options {
        node_class: match &args.node_class {
            Some(p) => Some(super::plugin::read_object(p)?),
            None => None,
        },
        delete_timeout: Duration::from_secs(args.delete_timeout_seconds),
    };
    report_of(&conformance::run(&plugin, &options).await)
}

fn read_config(file: &Path, config: Option<&Path>) -> anyhow::Result<PluginConfig> {
    let path = config
        .map(Path::to_path_buf)
        .unwrap_or_else(|| file.with_extension("yaml"));
    match files::read_to_string(&path) {
        Ok(text) => PluginConfig::from_yaml(&text).with_context(|| format!("{}", path.display())),
        Err(_) if config.is_none() => Ok(PluginConfig::default()),
        Err(e) => Err(e),
    }
}

/// `scheme://host[:port]` of a URL, as the allow-list takes it.
fn origin(url: &str) -> anyhow::Result<String> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("--endpoint {url:?} is not a URL"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        anyhow::bail!("--endpoint {url:?} needs a scheme and a host");
    };
    Ok(format!("{scheme}://{authority}"))
}
