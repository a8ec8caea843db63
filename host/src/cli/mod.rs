//! The subcommands of `karpenter`, one file each. They parse arguments and
//! wire library code; decisions live in `engine`, effects in the modules they
//! call.

/// `println!` for a command's output: a closed pipe (`| head`) ends the
/// command quietly instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::print("")
    };
    ($($arg:tt)*) => {
        $crate::cli::print(&format!($($arg)*))
    };
}

pub mod bench;
pub mod config;
pub mod controller;
pub mod explain;
pub mod files;
pub mod plugin;
pub mod plugin_push;
pub mod plugin_test;
pub mod providers;
pub mod simulate;
pub mod viewer;
mod wit_json;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "karpenter",
    version,
    // A flag given twice takes its last value, as kubectl's do: arguments
    // appended after the chart's (its extraArgs) override them.
    args_override_self = true,
    about = "A Karpenter-compatible node autoscaler whose cloud providers are WebAssembly plugins"
)]
pub struct Cli {
    /// Log level filter (RUST_LOG syntax), e.g. info or karpenter=debug.
    #[arg(long, global = true, env = "LOG_LEVEL", default_value = "warn")]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and call provider plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Print the NodeClaims the provisioner would create for some manifests.
    Simulate(simulate::SimulateArgs),
    /// Run the controller: provision nodes for pending pods and manage their lifecycle.
    Controller(Box<controller::ControllerArgs>),
    /// Explain, against a live cluster, why a pod is pending or where it goes.
    #[command(subcommand)]
    Explain(explain::ExplainCommand),
    /// The nodes as the controller sees them: per NodePool, requested CPU
    /// and memory against allocatable, prices, pending pods.
    Viewer(viewer::ViewerArgs),
    /// Generate installation files (the Helm chart's values).
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Benchmarks of the engine and the plugin runtime.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

pub fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // The live viewer owns the terminal: a log line would tear its frame,
    // and its status line reports what the logs would.
    let quiet = matches!(&cli.command, Command::Viewer(v) if !v.once);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || -> Box<dyn std::io::Write> {
            if quiet {
                Box::new(std::io::sink())
            } else {
                Box::new(std::io::stderr())
            }
        });
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Plugin(cmd) => plugin::run(cmd).await,
        Command::Simulate(args) => simulate::run(args).await,
        Command::Bench(cmd) => bench::run(cmd).await,
        Command::Controller(args) => controller::run(*args).await,
        Command::Explain(cmd) => explain::run(cmd).await,
        Command::Viewer(args) => viewer::run(args).await,
        Command::Config(cmd) => config::run(cmd).await,
    }
}

/// Writes a line of a command's output to stdout; a closed pipe (`| head`)
/// ends the process quietly, as the reader has all it wanted.
pub fn print(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        _ => {}
    }
}
