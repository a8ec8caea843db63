//! `karpenter controller`: runs the controller against the cluster of the
//! current kubeconfig (or the pod's service account), with the plugins of a
//! directory. Options take Karpenter's environment variable names.

use super::files;
use anyhow::Context;
use cap_std::ambient_authority;
use cap_std::fs::Dir;
use clap::{Args, ValueEnum};
use karpenter_controller::{self as controller, batcher, leader};
use karpenter_runtime::capabilities::cluster::ClusterView;
use karpenter_runtime::capabilities::secrets::SecretStore;
use karpenter_runtime::capabilities::tokens;
use karpenter_runtime::{Compiler, Registry, Runtime, RuntimeOptions, SourceRoots};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use vocabulary::duration as durations;

#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The plugins: `<name>.wasm` with an optional `<name>.yaml` each (a
    /// mounted ConfigMap in production; changes are picked up live).
    #[arg(long, env = "PLUGIN_DIR", default_value = "/etc/karpenter/plugins")]
    pub plugin_dir: PathBuf,
    /// A mounted volume (an OCI image volume, a PVC) holding plugins too
    /// large for a ConfigMap; a plugin's yaml names its file with
    /// `source: {volume: <path>, sha256: <hex>}`.
    #[arg(long, env = "PLUGIN_VOLUME")]
    pub plugin_volume: Option<PathBuf>,
    /// Secrets that plugins may be granted, as `<secret>/<key>` files.
    #[arg(long, env = "SECRETS_DIR")]
    pub secrets_dir: Option<PathBuf>,
    /// Where compiled plugins are cached across restarts.
    #[arg(long, env = "PRECOMPILED_DIR")]
    pub precompiled_dir: Option<PathBuf>,
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// The API server address nodes join; defaults to the kubeconfig's.
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// PEM CA bundle of the API server, for plugins that call it or put it
    /// into bootstrap data.
    #[arg(long, env = "CLUSTER_CA_FILE")]
    pub cluster_ca_file: Option<PathBuf>,
    /// PEM CA bundle trusted for outbound HTTPS besides the built-in roots,
    /// by the token source and plugins' HTTP: a private cloud's CA, or an
    /// emulator's in tests.
    #[arg(long, env = "TRUSTED_CA_FILE")]
    pub trusted_ca_file: Option<PathBuf>,
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = duration)]
    pub batch_idle_duration: Duration,
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = duration)]
    pub batch_max_duration: Duration,
    #[arg(long, env = "PREFERENCE_POLICY", value_enum, default_value_t = PreferencePolicy::Respect)]
    pub preference_policy: PreferencePolicy,
    #[arg(long, env = "MIN_VALUES_POLICY", value_enum, default_value_t = MinValuesPolicy::Strict)]
    pub min_values_policy: MinValuesPolicy,
    #[arg(long, env = "REGISTRATION_TTL", default_value = "15m", value_parser = duration)]
    pub registration_ttl: Duration,
    #[arg(long, env = "GC_INTERVAL", default_value = "2m", value_parser = duration)]
    pub gc_interval: Duration,
    /// How often disruption decides.
    #[arg(long, env = "DISRUPTION_INTERVAL", default_value = "10s", value_parser = duration)]
    pub disruption_interval: Duration,
    /// How long after a consolidation decision it is checked again.
    #[arg(long, env = "DISRUPTION_VALIDATION", default_value = "15s", value_parser = duration)]
    pub disruption_validation: Duration,
    /// Karpenter's feature gates, e.g. "NodeRepair=true,SpotToSpotConsolidation=true".
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    #[arg(long, env = "DISABLE_LEADER_ELECTION")]
    pub disable_leader_election: bool,
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kube-system")]
    pub leader_election_namespace: String,
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_lease_duration: Duration,
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_renew_deadline: Duration,
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub leader_retry_period: Duration,
    /// Serves /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,
    /// This replica's name in the lease and on events.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PreferencePolicy {
    Respect,
    Ignore,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "PascalCase")]
pub enum MinValuesPolicy {
    Strict,
    BestEffort,
}

fn duration(s: &str) -> Result<Duration, String> {
    durations::parse(s).map_err(|e| e.to_string())
}

fn open_dir(path: &PathBuf) -> anyhow::Result<Dir> {
    Dir::open_ambient_dir(path, ambient_authority())
        .with_context(|| format!("opening {}", path.display()))
}

pub async fn run(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    let config = kube::Config::infer()
        .await
        .context("no cluster: set KUBECONFIG or run in a pod")?;
    let endpoint = args.cluster_endpoint.clone().unwrap_or_else(|| {
        config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string()
    });
    let client = karpenter_controller::api_client::client(config)
        .context("building the Kubernetes client")?;
    let ca = match &args.cluster_ca_file {
        Some(p) => files::read_to_string(p)?,
        None => String::new(),
    };
    let trusted: Vec<Vec<u8>> = match &args.trusted_ca_file {
        Some(p) => vec![files::read_to_string(p)?.into_bytes()],
        None => vec![],
    };
    let precompiled = match &args.precompiled_dir {
        Some(p) => Some(open_dir(p)?),
        None => files::precompiled_dir(),
    };
    let pulled = files::pulled_dir(precompiled.as_ref());
    let runtime = Runtime::new(RuntimeOptions {
        precompiled,
        secrets: match &args.secrets_dir {
            Some(p) => SecretStore::new(open_dir(p)?),
            None => SecretStore::none(),
        },
        cluster: Arc::new(ClusterView::new(&args.cluster_name, &endpoint, &ca)),
        tokens: tokens::from_environment(&trusted)?,
        extra_roots: trusted,
        compiler: Compiler::current_executable()?,
    })?;
    let roots = SourceRoots {
        volume: match &args.plugin_volume {
            Some(p) => Some(open_dir(p)?),
            None => None,
        },
        builtin: &karpenter_plugin_bundle::PROVIDERS,
        pulled,
    };
    // Loaded by the controller once its health endpoints are up.
    let registry = Registry::unloaded(runtime, open_dir(&args.plugin_dir)?, roots);
    let identity = args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let gates = feature_gates(&args.feature_gates)?;
    let gate = |name: &str| gates.get(name).copied().unwrap_or(false);
    // Beta upstream, and so on unless turned off.
    let reserved_capacity = gates.get("ReservedCapacity").copied().unwrap_or(true);
    let options = controller::Options {
        batch: batcher::Window {
            idle: args.batch_idle_duration,
            max: args.batch_max_duration,
        },
        engine: engine::Options {
            preference_policy: match args.preference_policy {
                PreferencePolicy::Respect => engine::PreferencePolicy::Respect,
                PreferencePolicy::Ignore => engine::PreferencePolicy::Ignore,
            },
            min_values_policy: match args.min_values_policy {
                MinValuesPolicy::Strict => engine::MinValuesPolicy::Strict,
                MinValuesPolicy::BestEffort => engine::MinValuesPolicy::BestEffort,
            },
            reserved_capacity,
            ..engine::Options::default()
        },
        disruption: controller::disruption::Settings {
            interval: args.disruption_interval,
            validation: args.disruption_validation,
            node_repair: gate("NodeRepair"),
            ..Default::default()
        },
        spot_to_spot_consolidation: gate("SpotToSpotConsolidation"),
        node_overlay: gate("NodeOverlay"),
        static_capacity: gate("StaticCapacity"),
        capacity_buffer: gate("CapacityBuffer"),
        registration_ttl: args.registration_ttl,
        gc_interval: args.gc_interval,
        election: (!args.disable_leader_election).then(|| leader::Election {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_name.clone(),
            identity: identity.clone(),
            lease_duration: args.leader_lease_duration,
            renew_deadline: args.leader_renew_deadline,
            retry_period: args.leader_retry_period,
        }),
        metrics_addr: args.metrics_address,
        identity,
        ..controller::Options::default()
    };
    controller::run(client, registry, options).await?;
    Ok(ExitCode::SUCCESS)
}

/// `Name=true,Other=false` into a map; unknown gates are kept (and ignored).
pub(super) fn feature_gates(
    text: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, bool>> {
    text.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| {
            let (name, value) = g
                .split_once('=')
                .ok_or_else(|| anyhow::anyhow!("feature gate {g:?} is not Name=true|false"))?;
            let on = value.trim().parse::<bool>().map_err(|_| {
                anyhow::anyhow!("feature gate {name}: {value:?} is not true or false")
            })?;
            Ok((name.trim().to_string(), on))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn a_flag_given_twice_takes_its_last_value() {
        let cli = crate::cli::Cli::try_parse_from([
            "karpenter",
            "controller",
            "--gc-interval",
            "5s",
            "--gc-interval",
            "2m",
        ])
        .expect("parses");
        let crate::cli::Command::Controller(args) = cli.command else {
            panic!("the controller command");
        };
        assert_eq!(args.gc_interval, std::time::Duration::from_secs(120));
    }

    #[test]
    fn feature_gates_parse_like_karpenter() {
        let g =
            super::feature_gates("NodeRepair=true, SpotToSpotConsolidation=false").expect("valid");
        assert_eq!(g.get("NodeRepair"), Some(&true));
        assert_eq!(g.get("SpotToSpotConsolidation"), Some(&false));
        assert!(super::feature_gates("NodeRepair").is_err());
        assert!(super::feature_gates("").expect("valid").is_empty());
    }
}
