//! The host capabilities a plugin may import, one module each. Every one is
//! granted per plugin: what was not granted answers with a denial.

pub(crate) mod cache;
pub mod cluster;
pub(crate) mod config;
pub(crate) mod log;
pub mod secrets;
pub(crate) mod signing;
pub mod tokens;

use std::sync::Arc;

use super::budget::MemoryBudget;
use super::config::PluginConfig;

/// What one plugin was granted, shared by all its instances.
#[derive(Clone)]
pub struct Capabilities {
    pub plugin: Arc<str>,
    pub config: Arc<PluginConfig>,
    pub secrets: Arc<secrets::SecretStore>,
    pub tokens: Arc<dyn tokens::TokenSource>,
    pub cache: Arc<cache::KvCache>,
    /// What the host may hold for the plugin; its cache draws on it too.
    pub budget: Arc<MemoryBudget>,
    pub log: Arc<log::LogLimiter>,
    pub cluster: Arc<cluster::ClusterView>,
}
