//! `karpenter bench`: print the figures of the engine and the plugin runtime.

use super::Output;
use crate::bench;
use clap::Subcommand;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The provisioning scheduler on Karpenter's benchmark shape.
    Scheduling {
        #[arg(long, default_value_t = 20_000)]
        pods: usize,
        #[arg(long, default_value_t = 400)]
        instance_types: usize,
        /// Runs to take the fastest of.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// NodeOverlays laid over the catalog before each run.
        #[arg(long, default_value_t = 0)]
        overlays: usize,
        /// Reservations of 10 instances, one for each of the first N types.
        #[arg(long, default_value_t = 0)]
        reservations: usize,
        /// Virtual pods of one CapacityBuffer placed after the pods.
        #[arg(long, default_value_t = 0)]
        buffer_replicas: usize,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// One disruption decision over a consolidatable cluster.
    Disruption {
        #[arg(long, default_value_t = 1_000)]
        nodes: usize,
        /// Pods; ten per node by default.
        #[arg(long)]
        pods: Option<usize>,
        /// Runs to take the fastest of.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Virtual pods of one CapacityBuffer, whose room is kept.
        #[arg(long, default_value_t = 0)]
        buffer_replicas: usize,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Plugin runtime: sizes, load, call overhead, concurrent creates.
    Plugins {
        /// The built plugins (`make plugins`): every .wasm is measured; the
        /// runtime's own figures need kwok.wasm among them.
        #[arg(long, default_value = "target/plugins")]
        plugins_dir: PathBuf,
        /// Concurrent create calls, each waiting on HTTP.
        #[arg(long, default_value_t = 100)]
        creates: usize,
        /// How long each create's HTTP call takes, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        http_wait_ms: u64,
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        BenchCommand::Scheduling {
            pods,
            instance_types,
            runs,
            overlays,
            reservations,
            buffer_replicas,
            output,
        } => {
            let features = bench::scheduling::Features {
                overlays,
                reservations,
                buffer_replicas,
            };
            let r = bench::scheduling::run(pods, instance_types, runs, features);
            if output == Output::Json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                outln!(
                    "pods {}  instance types {}  nodes launched {}  unschedulable {}  total ${:.2}/h  {:.4} s  {:.0} pods/s  peak RSS {}",
                    r.pods,
                    r.instance_types,
                    r.node_claims,
                    r.unschedulable,
                    r.total_price_per_hour,
                    r.seconds,
                    r.pods_per_second,
                    r.peak_rss_mib
                        .map(|m| format!("{m:.0} MiB"))
                        .unwrap_or_else(|| "n/a".into())
                );
                if r.overlays + r.reservations + r.buffer_replicas > 0 {
                    outln!(
                        "with {} overlays ({:.4} s to lay them over the catalog), {} reservations and a CapacityBuffer of {}",
                        r.overlays,
                        r.overlay_seconds,
                        r.reservations,
                        r.buffer_replicas
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Disruption {
            nodes,
            pods,
            buffer_replicas,
            runs,
            output,
        } => {
            let r =
                bench::disruption::run(nodes, pods.unwrap_or(nodes * 10), buffer_replicas, runs);
            if output == Output::Json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
                return Ok(ExitCode::SUCCESS);
            }
            let found = match (r.method, r.decision) {
                (Some(m), Some(d)) => format!(
                    "{d} {} node(s) by {} with {} replacement(s), saving ${:.3}/h of ${:.3}/h",
                    r.candidates,
                    m.as_str(),
                    r.replacements,
                    r.savings_per_hour,
                    r.candidates_price_per_hour
                ),
                _ => "no command".into(),
            };
            outln!(
                "nodes {}  pods {}  buffer {}  {:.4} s  {found}; kept: {} blocked, {} unconsolidatable, {} waiting  peak RSS {}",
                r.nodes,
                r.pods,
                r.buffer_replicas,
                r.seconds,
                r.blocked,
                r.unconsolidatable,
                r.waiting,
                r.peak_rss_mib
                    .map(|m| format!("{m:.0} MiB"))
                    .unwrap_or_else(|| "n/a".into())
            );
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Plugins {
            plugins_dir,
            creates,
            http_wait_ms,
            output,
        } => {
            let report = bench::plugins::run(bench::plugins::Options {
                plugins_dir: &plugins_dir,
                creates,
                http_wait: Duration::from_millis(http_wait_ms),
            })
            .await?;
            if output == Output::Json {
                outln!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(ExitCode::SUCCESS);
            }
            for (name, size) in &report.sizes {
                outln!(
                    "plugin size {name:<24} {size:>9} bytes ({:.0} KiB)",
                    *size as f64 / 1024.0
                );
            }
            match &report.runtime {
                Some(r) => {
                    outln!("first load (compile)             {:>9.2} ms", r.compile_ms);
                    outln!(
                        "calls below run on               {}",
                        if r.optimized {
                            "Cranelift's code"
                        } else {
                            "Winch's quick compile (cold plugin)"
                        }
                    );
                    outln!(
                        "load from precompiled cache      {:>9.2} ms",
                        r.load_precompiled_ms
                    );
                    outln!(
                        "trivial call (warm instance)     {:>9.2} us",
                        r.trivial_call_us
                    );
                    outln!(
                        "get-instance-types ({} types)   {:>9.1} us as tables, {:.1} us listed ({:.1}x)",
                        r.instance_types,
                        r.get_instance_types_us,
                        r.listed_instance_types_us,
                        r.listed_instance_types_us / r.get_instance_types_us
                    );
                    outln!(
                        "  into the engine's catalog       {:>9.1} us",
                        r.into_engine_us
                    );
                    outln!(
                        "{} concurrent creates, {:.1} s HTTP each: {:.2} s in total",
                        r.concurrent_creates,
                        r.create_http_wait_s,
                        r.concurrent_creates_total_s
                    );
                }
                None => outln!(
                    "no kwok.wasm in {}: load, call and concurrent-create figures need it (`make plugins`)",
                    plugins_dir.display()
                ),
            }
            for f in &report.get_instance_types_by_plugin {
                if let Some(why) = &f.not_measured {
                    outln!("get-instance-types {:<10} not measured: {why}", f.plugin);
                    continue;
                }
                outln!(
                    "get-instance-types {:<10} ({} types, default NodeClass): cold {:.1} us, warm {:.1} us{}",
                    f.plugin,
                    f.instance_types,
                    f.cold_us,
                    f.warm_us,
                    f.listed_us
                        .map(|l| format!(" (listed {l:.1} us)"))
                        .unwrap_or_default()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
