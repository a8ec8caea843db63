//! `karpenter config`: generators of installation files.
//!
//! `helm` writes the values file of the seed's AKS Flex guide. It is the one
//! cloud-specific corner of `host/`: it runs once on an operator's machine,
//! never on a controller path, and nothing else imports it.

mod aks;
mod bootstrap_token;
mod dotenv;
mod helm;
mod values;

use clap::Subcommand;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write karpenter_values.yaml for an AKS cluster (Azure and Nebius
    /// nodes) from LOCATION, AZURE_SUBSCRIPTION_ID, RESOURCE_GROUP_NAME,
    /// CLUSTER_NAME (environment or .env) and the live cluster.
    Helm(helm::HelmArgs),
}

pub async fn run(cmd: ConfigCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Helm(args) => helm::run(args).await,
    }
}
