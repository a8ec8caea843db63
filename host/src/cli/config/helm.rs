//! `karpenter config helm`: reads what the operator knows (environment or
//! `.env`, the files named on the command line), asks the live cluster for the
//! rest, and writes the chart's values file.

use super::aks::{self, Discovered};
use super::bootstrap_token;
use super::dotenv;
use super::values::{Image, Values};
use anyhow::Context;
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use vocabulary::duration;

#[derive(Debug, Args)]
pub struct HelmArgs {
    /// A Nebius service account's credentials JSON, embedded for the chart's
    /// `nebius-credentials` Secret.
    #[arg(long)]
    pub nebius_credentials_file: Option<PathBuf>,
    /// The SSH public key of provisioned nodes (SSH_PUBLIC_KEY).
    #[arg(long)]
    pub ssh_public_key_file: Option<PathBuf>,
    /// Where the values file goes.
    #[arg(long, default_value = "karpenter_values.yaml")]
    pub output: PathBuf,
    /// The controller image, `repository[:tag][@digest]`.
    #[arg(long)]
    pub image: Option<String>,
    /// The `.env` file read for variables the environment lacks.
    #[arg(long, default_value = ".env")]
    pub env_file: PathBuf,
    /// Lifetime of the kubelet bootstrap token it creates. Running the
    /// command again once half of it has passed rotates the token; the
    /// running controller takes the new one without a restart.
    #[arg(long, default_value = "2160h", value_parser = duration)]
    pub bootstrap_token_ttl: Duration,
    /// The namespace the chart is installed in, where the token's Secret
    /// (`kubelet-bootstrap-token`) is written.
    #[arg(long, default_value = "karpenter")]
    pub namespace: String,
    /// How long to wait for the cluster before leaving its values unresolved.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub cluster_timeout: Duration,
}

fn duration(s: &str) -> Result<Duration, String> {
    duration::parse(s).map_err(|e| e.to_string())
}

fn install_command(namespace: &str, values: &Path) -> String {
    format!(
        "helm upgrade --install karpenter charts/karpenter \\\n  --namespace {namespace} --create-namespace \\\n  --values {}",
        values.display()
    )
}

/// What the live cluster answered.
#[derive(Debug, Default)]
struct Live {
    endpoint: Option<String>,
    discovered: Discovered,
    /// Written to its Secret in the release namespace.
    bootstrap_token: Option<bootstrap_token::BootstrapToken>,
}

pub async fn run(args: HelmArgs) -> anyhow::Result<ExitCode> {
    // Everything that can fail on the operator's input fails before the
    // cluster is touched or a file written.
    let nebius = match &args.nebius_credentials_file {
        Some(p) => Some(nebius_credentials(p)?),
        None => None,
    };
    let ssh_key = match &args.ssh_public_key_file {
        Some(p) => Some(ssh_public_key(p)?),
        None => None,
    };
    let image = args.image.as_deref().map(Image::parse).transpose()?;
    let vars = variables(&args.env_file)?;
    let var = |k: &str| vars.get(k).filter(|v| !v.is_empty()).cloned();
    if let Some(dir) = args.output.parent().filter(|d| !d.as_os_str().is_empty()) {
        anyhow::ensure!(
            dir.is_dir(),
            "--output {}: {} is not a directory",
            args.output.display(),
            dir.display()
        );
    }

    let live = match tokio::time::timeout(
        args.cluster_timeout,
        live(&args, var("AZURE_SUBSCRIPTION_ID")),
    )
    .await
    {
        Ok(Ok(live)) => live,
        Ok(Err(e)) => {
            tracing::warn!(error = %format!("{e:#}"), "the cluster is not reachable; its values are left unresolved");
            Live::default()
        }
        Err(_) => {
            tracing::warn!(timeout = ?args.cluster_timeout, "the cluster did not answer; its values are left unresolved");
            Live::default()
        }
    };
    let d = &live.discovered;
    let client_id = d.client_id.clone().or_else(|| var("AZURE_CLIENT_ID"));
    let values = Values {
        cluster_name: var("CLUSTER_NAME"),
        cluster_endpoint: live.endpoint.clone(),
        client_id: client_id.clone(),
        nebius_credentials: nebius,
        image,
        env: vec![
            (
                "ARM_CLOUD",
                Some(var("ARM_CLOUD").unwrap_or_else(|| "AzurePublicCloud".into())),
            ),
            ("LOCATION", var("LOCATION")),
            ("ARM_RESOURCE_GROUP", var("RESOURCE_GROUP_NAME")),
            (
                "AZURE_TENANT_ID",
                d.tenant_id.clone().or_else(|| var("AZURE_TENANT_ID")),
            ),
            ("AZURE_CLIENT_ID", client_id),
            ("AZURE_SUBSCRIPTION_ID", var("AZURE_SUBSCRIPTION_ID")),
            ("AZURE_NODE_RESOURCE_GROUP", d.node_resource_group.clone()),
            (
                "SSH_PUBLIC_KEY",
                Some(ssh_key.unwrap_or_else(|| "ssh-key-not-set".into())),
            ),
            ("VNET_SUBNET_ID", d.subnet_id.clone()),
            ("DISABLE_LEADER_ELECTION", Some("false".into())),
        ],
    };
    write(&args.output, &values.render())?;
    let unresolved = values.unresolved();
    if !unresolved.is_empty() {
        eprintln!(
            "{}: edit these before installing (written as {}): {}",
            args.output.display(),
            super::values::UNRESOLVED,
            unresolved.join(", ")
        );
    }
    match &live.bootstrap_token {
        Some(t) => eprintln!(
            "kubelet bootstrap token: Secret {}/{} (expires {}); run this command again before then to rotate it",
            args.namespace,
            bootstrap_token::PUBLISHED,
            t.expires.map_or("never".to_string(), |e| e.to_string()),
        ),
        None => eprintln!(
            "no kubelet bootstrap token was made: nodes cannot join until Secret {}/{} holds one as key `token` (<id>.<secret>)",
            args.namespace,
            bootstrap_token::PUBLISHED,
        ),
    }
    crate::cli::print(&install_command(&args.namespace, &args.output));
    Ok(ExitCode::SUCCESS)
}

/// The environment, with the `.env` file filling what it lacks.
fn variables(env_file: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut vars = match std::fs::read_to_string(env_file) {
        Ok(text) => dotenv::parse(&text),
        // The default `.env` is optional; one named on the command line is not.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && env_file == Path::new(".env") => {
            BTreeMap::new()
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", env_file.display())),
    };
    for name in [
        "LOCATION",
        "AZURE_SUBSCRIPTION_ID",
        "RESOURCE_GROUP_NAME",
        "CLUSTER_NAME",
        "ARM_CLOUD",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_ID",
    ] {
        if let Ok(v) = std::env::var(name) {
            vars.insert(name.to_string(), v);
        }
    }
    Ok(vars)
}

async fn live(args: &HelmArgs, subscription: Option<String>) -> anyhow::Result<Live> {
    let config = kube::Config::infer().await.context("no kubeconfig")?;
    let endpoint = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    client
        .apiserver_version()
        .await
        .with_context(|| format!("asking {endpoint} for its version"))?;
    let discovered = aks::discover(&client, subscription.as_deref())
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the cluster's nodes");
            Discovered::default()
        });
    let bootstrap_token = match made_bootstrap_token(&client, args).await {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "no bootstrap token");
            None
        }
    };
    Ok(Live {
        endpoint: Some(endpoint),
        discovered,
        bootstrap_token,
    })
}

async fn made_bootstrap_token(
    client: &kube::Client,
    args: &HelmArgs,
) -> anyhow::Result<bootstrap_token::BootstrapToken> {
    let token = bootstrap_token::ensure(client, Some(args.bootstrap_token_ttl)).await?;
    bootstrap_token::publish(client, &args.namespace, &token).await?;
    Ok(token)
}

fn nebius_credentials(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--nebius-credentials-file {}", path.display()))?;
    serde_json::from_str::<serde_json::Value>(&text).with_context(|| {
        format!(
            "--nebius-credentials-file {}: not a JSON credentials file",
            path.display()
        )
    })?;
    Ok(text)
}

fn ssh_public_key(path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--ssh-public-key-file {}", path.display()))?;
    let key = text.trim();
    anyhow::ensure!(
        key.lines().count() == 1 && key.split_whitespace().count() >= 2,
        "--ssh-public-key-file {}: expected one OpenSSH public key line",
        path.display()
    );
    Ok(key.to_string())
}

/// Writes through a temporary file in the same directory, so a failure
/// leaves no half-written values file.
fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
