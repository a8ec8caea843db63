//! `karpenter:provider/config`: the plugin's settings and granted secrets.

use crate::plugins::bindings::v0_1_0::karpenter::provider::config::Host;
use crate::plugins::state::State;

impl Host for State {
    async fn get_setting(&mut self, key: String) -> Option<String> {
        self.caps.config.settings.get(&key).cloned()
    }

    async fn settings(&mut self) -> Vec<(String, String)> {
        self.caps
            .config
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    async fn get_secret(&mut self, name: String) -> Result<Vec<u8>, String> {
        if !self.caps.config.secrets.contains(&name) {
            tracing::warn!(plugin = %self.caps.plugin, secret = %name, "secret denied: not granted to this plugin");
            return Err(format!(
                "secret {name:?} is not granted to plugin {}",
                self.caps.plugin
            ));
        }
        self.caps.secrets.read(&name).map_err(|e| format!("{e:#}"))
    }
}
