//! `karpenter plugin inspect|call|crd`: look into a plugin, call it by hand,
//! print the CRDs of its NodeClass kinds.

use super::{Output, files};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use karpenter_controller::crds::{self, NodePool};
use karpenter_controller::records;
use karpenter_runtime::{Plugin, PluginConfig, Runtime, RuntimeOptions, inspect, wit};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Print a plugin's name, contract version, NodeClass kinds, imported
    /// capabilities and size.
    Inspect {
        /// The plugin: a `.wasm` component, or `.wasm.zst`.
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Call one function of a plugin and print its result as JSON.
    Call(CallArgs),
    /// Print the CRD of each NodeClass kind the plugin serves, as YAML
    /// documents ready for `kubectl apply -f -`.
    Crd {
        /// The plugin: a `.wasm` component, or `.wasm.zst`.
        file: PathBuf,
    },
    /// Run the conformance kit: every check a provider must pass, against
    /// its backend; exits non-zero if any fails.
    Test(super::plugin_test::TestArgs),
    /// Publish a plugin to an OCI registry as a WebAssembly artifact and
    /// print its digest-pinned reference, for a yaml's `source: {oci: ...}`.
    Push(super::plugin_push::PushArgs),
    /// Compile a plugin for this build: the .wasm on stdin, the machine code
    /// on stdout. The controller runs it as a child process.
    #[command(hide = true)]
    Compile {
        /// Winch's quick compile instead of Cranelift's.
        #[arg(long)]
        quick: bool,
    },
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The plugin: a `.wasm` component, or `.wasm.zst`.
    pub file: PathBuf,
    /// The contract function to call; those taking a NodeClaim or an
    /// instance id are driven by the controller, not by hand.
    #[arg(value_enum)]
    pub function: Function,
    /// The NodeClass object (YAML or JSON).
    #[arg(long)]
    pub node_class: Option<PathBuf>,
    /// The NodePool object (YAML or JSON); a minimal one when omitted.
    #[arg(long)]
    pub node_pool: Option<PathBuf>,
    /// The plugin's configuration; `<file>.yaml` beside the plugin when omitted.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Function {
    /// Its name, providerID schemes and NodeClass kinds.
    Metadata,
    /// Check `--node-class` and report its status.
    ValidateNodeClass,
    /// The instance types `--node-pool` with `--node-class` may launch.
    GetInstanceTypes,
    /// Every instance the plugin manages.
    ListInstances,
    /// The node conditions it asks the controller to repair.
    RepairPolicies,
}

pub async fn run(cmd: PluginCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Inspect { file, output } => inspect_cmd(&file, output).await,
        PluginCommand::Call(args) => call_cmd(args).await,
        PluginCommand::Crd { file } => crd_cmd(&file).await,
        PluginCommand::Test(args) => super::plugin_test::run(args).await,
        PluginCommand::Push(args) => super::plugin_push::run(args).await,
        PluginCommand::Compile { quick } => {
            karpenter_runtime::compile_stdin_to_stdout(if quick {
                karpenter_runtime::Tier::Quick
            } else {
                karpenter_runtime::Tier::Optimized
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Loads one plugin file with its configuration, using the host's
/// precompiled cache.
pub async fn load_file(
    file: &Path,
    config: Option<&Path>,
) -> anyhow::Result<(Arc<Runtime>, Plugin)> {
    let (name, wasm) = files::read_plugin(file)?;
    let config_path = config
        .map(Path::to_path_buf)
        .unwrap_or_else(|| file.with_file_name(format!("{name}.yaml")));
    let config = match files::read_to_string(&config_path) {
        Ok(text) => {
            PluginConfig::from_yaml(&text).with_context(|| format!("{}", config_path.display()))?
        }
        Err(_) if config.is_none() => PluginConfig::default(),
        Err(e) => return Err(e),
    };
    let precompiled = files::precompiled_dir();
    let runtime = Runtime::new(RuntimeOptions {
        precompiled,
        ..RuntimeOptions::default()
    })?;
    let plugin = runtime.load(&name, &wasm, config).await?;
    Ok((runtime, plugin))
}

async fn inspect_cmd(file: &Path, output: Output) -> anyhow::Result<ExitCode> {
    let (_, plugin) = load_file(file, None).await?;
    let imports = inspect::imports(&plugin.component());
    let report = serde_json::json!({
        "name": plugin.metadata.name,
        "contract": format!("karpenter:provider@{}", plugin.contract_version),
        "size": plugin.size,
        "sha256": plugin.sha256,
        "providerIdSchemes": plugin.metadata.provider_id_schemes,
        "nodeClasses": plugin.metadata.node_classes.iter().map(|k| serde_json::json!({
            "group": k.group, "version": k.version, "kind": k.kind, "plural": k.plural,
        })).collect::<Vec<_>>(),
        "imports": imports,
    });
    if output == Output::Json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("name:          {}", plugin.metadata.name);
    outln!(
        "contract:      karpenter:provider@{}",
        plugin.contract_version
    );
    outln!(
        "size:          {} bytes ({:.0} KiB)",
        plugin.size,
        plugin.size as f64 / 1024.0
    );
    outln!("sha256:        {}", plugin.sha256);
    outln!(
        "provider IDs:  {}",
        plugin
            .metadata
            .provider_id_schemes
            .iter()
            .map(|s| format!("{s}://"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for k in &plugin.metadata.node_classes {
        outln!(
            "node class:    {}/{} {} ({})",
            k.group,
            k.version,
            k.kind,
            k.plural
        );
    }
    outln!("capabilities:");
    for name in imports
        .iter()
        .filter(|n| n.starts_with("karpenter:") || n.starts_with("wasi:http/"))
    {
        outln!("  {name}");
    }
    let wasi: Vec<&String> = imports
        .iter()
        .filter(|n| n.starts_with("wasi:") && !n.starts_with("wasi:http/"))
        .collect();
    if !wasi.is_empty() {
        outln!("wasi (sandboxed: no files, environment or sockets):");
        for name in wasi {
            outln!("  {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn call_cmd(args: CallArgs) -> anyhow::Result<ExitCode> {
    let (_runtime, plugin) = load_file(&args.file, args.config.as_deref()).await?;
    let node_class = match &args.node_class {
        Some(path) => records::node_class(&read_object(path)?)?,
        None => wit::NodeClass {
            name: "default".into(),
            generation: 1,
            json: "{}".into(),
        },
    };
    let value = match args.function {
        Function::Metadata => serde_json::to_value(plugin.metadata_call().await?)?,
        Function::ValidateNodeClass => {
            serde_json::to_value(plugin.validate_node_class(&node_class).await?)?
        }
        Function::GetInstanceTypes => {
            let pool = match &args.node_pool {
                Some(path) => {
                    let np: NodePool = serde_json::from_value(read_object(path)?)
                        .context("parsing the NodePool")?;
                    records::node_pool(&np)?
                }
                None => default_pool(&plugin, &node_class),
            };
            serde_json::to_value(
                plugin
                    .get_instance_types(&pool, &node_class)
                    .await?
                    .into_listed(),
            )?
        }
        Function::ListInstances => serde_json::to_value(plugin.list().await?)?,
        Function::RepairPolicies => serde_json::to_value(plugin.repair_policies().await?)?,
    };
    super::print(&serde_json::to_string_pretty(
        &super::wit_json::to_wit_names(value),
    )?);
    Ok(ExitCode::SUCCESS)
}

async fn crd_cmd(file: &Path) -> anyhow::Result<ExitCode> {
    let (_runtime, plugin) = load_file(file, None).await?;
    let mut out = String::new();
    for kind in &plugin.metadata.node_classes {
        let crd = crds::node_class::crd(kind)?;
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    super::print(out.trim_end());
    Ok(ExitCode::SUCCESS)
}

fn default_pool(plugin: &Plugin, class: &wit::NodeClass) -> wit::NodePool {
    let kind = plugin.metadata.node_classes.first();
    records::bare_node_pool(
        "default",
        wit::NodeClassRef {
            group: kind.map(|k| k.group.clone()).unwrap_or_default(),
            kind: kind.map(|k| k.kind.clone()).unwrap_or_default(),
            name: class.name.clone(),
        },
    )
}

/// One Kubernetes object from a YAML or JSON file.
pub fn read_object(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = files::read_to_string(path)?;
    let value: serde_json::Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    Ok(value)
}
