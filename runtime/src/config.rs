//! Per-plugin configuration: what the operator grants a plugin.
//!
//! It sits next to the plugin as `<name>.yaml` (a key of the same ConfigMap in
//! production). Everything not granted is denied.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

use super::allowlist::AllowList;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// `scheme://host[:port]` entries the plugin may send HTTP requests to.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Authorities (`host:port`) spoken to in cleartext HTTP/2 (h2c) by prior
    /// knowledge, for gRPC endpoints without TLS such as local emulators.
    #[serde(default)]
    pub h2c_hosts: Vec<String>,
    /// Secrets the plugin may read, as paths under the host's secrets
    /// directory: `<secret>/<key>`.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Free-form settings, e.g. LOCATION or ARM_RESOURCE_GROUP.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
    /// Settings whose value is a granted secret, `<secret>/<key>`, read when
    /// the plugin asks: a rotated Secret reaches the plugin without a reload,
    /// and the value never sits in this file. Granting the setting grants
    /// that secret to it, through this setting only.
    #[serde(default)]
    pub secret_settings: BTreeMap<String, String>,
    /// Whether the plugin may ask the host's token source for access tokens.
    #[serde(default)]
    pub tokens: bool,
    /// Linear memory cap per instance.
    #[serde(default = "default_memory_mib")]
    pub memory_mib: u64,
    /// Everything the host holds for the plugin at once: all its instances'
    /// linear memories and tables, its cache entries and the request bodies
    /// it is sending. At least `memoryMib`.
    #[serde(default = "default_memory_budget_mib")]
    pub memory_budget_mib: u64,
    /// CPU time one call may spend running guest code (waiting on HTTP does
    /// not count).
    #[serde(default = "default_cpu_ms")]
    pub cpu_ms: u64,
    /// Wall-clock limit of one call, waits included: a VM create polls for
    /// minutes.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_seconds: u64,
    /// Instances alive at once; further calls wait for one to finish. Each
    /// instance holds its own linear memory, so this bounds the plugin's.
    #[serde(default = "default_max_instances")]
    pub max_instances: u32,
    /// Where the WebAssembly comes from when it is not `<name>.wasm` beside
    /// this file: a mounted volume or an HTTPS URL pinned by sha256.
    #[serde(default)]
    pub source: Option<super::source::Source>,
}

fn default_memory_mib() -> u64 {
    128
}
fn default_memory_budget_mib() -> u64 {
    256
}
fn default_cpu_ms() -> u64 {
    2_000
}
fn default_call_timeout() -> u64 {
    900
}
fn default_max_instances() -> u32 {
    64
}

impl Default for PluginConfig {
    fn default() -> Self {
        PluginConfig {
            allowed_hosts: Vec::new(),
            h2c_hosts: Vec::new(),
            secrets: Vec::new(),
            settings: BTreeMap::new(),
            secret_settings: BTreeMap::new(),
            tokens: false,
            memory_mib: default_memory_mib(),
            memory_budget_mib: default_memory_budget_mib(),
            cpu_ms: default_cpu_ms(),
            call_timeout_seconds: default_call_timeout(),
            max_instances: default_max_instances(),
            source: None,
        }
    }
}

impl PluginConfig {
    pub fn from_yaml(text: &str) -> anyhow::Result<Self> {
        let config: PluginConfig = serde_saphyr::from_str(text)?;
        config.allow_list()?;
        anyhow::ensure!(config.memory_mib >= 1, "memoryMib must be at least 1");
        anyhow::ensure!(
            config.memory_budget_mib >= config.memory_mib,
            "memoryBudgetMib ({}) must be at least memoryMib ({}): one instance must fit in the plugin's budget",
            config.memory_budget_mib,
            config.memory_mib
        );
        anyhow::ensure!(config.max_instances >= 1, "maxInstances must be at least 1");
        anyhow::ensure!(config.cpu_ms >= 1, "cpuMs must be at least 1");
        for (name, secret) in &config.secret_settings {
            anyhow::ensure!(
                !config.settings.contains_key(name),
                "setting {name} is in both settings and secretSettings: keep one"
            );
            anyhow::ensure!(
                secret
                    .split_once('/')
                    .is_some_and(|(s, k)| !s.is_empty() && !k.is_empty()),
                "secretSettings.{name}: {secret:?} is not <secret>/<key>"
            );
        }
        if let Some(source) = &config.source {
            source.check()?;
        }
        Ok(config)
    }

    pub fn allow_list(&self) -> anyhow::Result<AllowList> {
        AllowList::parse(&self.allowed_hosts)
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_seconds)
    }

    pub fn memory_bytes(&self) -> usize {
        mib_to_bytes(self.memory_mib)
    }

    pub fn memory_budget_bytes(&self) -> usize {
        mib_to_bytes(self.memory_budget_mib)
    }
}

fn mib_to_bytes(mib: u64) -> usize {
    usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config_and_rejects_unknown_keys() {
        let c = PluginConfig::from_yaml(
            "allowedHosts: [\"https://management.azure.com\"]\nsecrets: [azure/token]\nsettings: {LOCATION: westus3}\nmemoryMib: 64\n",
        )
        .expect("valid");
        assert_eq!(c.memory_mib, 64);
        assert_eq!(c.settings["LOCATION"], "westus3");
        assert_eq!(c.cpu_ms, 2000);
        let err = PluginConfig::from_yaml("allowedHost: []").expect_err("typo");
        assert!(
            err.to_string().contains("unknown field `allowedHost`"),
            "{err}"
        );
        let err =
            PluginConfig::from_yaml("memoryMib: 512\n").expect_err("budget below one instance");
        assert!(
            err.to_string()
                .contains("memoryBudgetMib (256) must be at least memoryMib (512)"),
            "{err}"
        );
        let err = PluginConfig::from_yaml(
            "settings: {TOKEN: plain}\nsecretSettings: {TOKEN: bootstrap/token}\n",
        )
        .expect_err("one setting, two sources");
        assert!(
            err.to_string().contains("both settings and secretSettings"),
            "{err}"
        );
        let err = PluginConfig::from_yaml("secretSettings: {TOKEN: token}\n").expect_err("no key");
        assert!(err.to_string().contains("not <secret>/<key>"), "{err}");
        let err = PluginConfig::from_yaml("allowedHosts: [\"*\"]").expect_err("bare wildcard");
        assert!(format!("{err:#}").contains("bare"), "{err:#}");
    }
}
