//! `karpenter:provider/config`: the plugin's settings and granted secrets.

use crate::bindings::v0_1_4::karpenter::provider::config::Host;
use crate::state::State;

impl State {
    /// A secret listed in the plugin's `secrets`; any other is denied.
    pub(super) fn granted_secret(&self, name: &str) -> Result<Vec<u8>, String> {
        if !self.caps.config.secrets.iter().any(|s| s == name) {
            tracing::warn!(plugin = %self.caps.plugin, secret = %name, "secret denied: not granted to this plugin");
            return Err(format!(
                "secret {name:?} is not granted to plugin {}",
                self.caps.plugin
            ));
        }
        self.caps.secrets.read(name).map_err(|e| format!("{e:#}"))
    }

    /// A `secretSettings` entry's current value; unreadable means unset, as
    /// the plugin would see a setting the operator left out.
    fn secret_setting(&self, key: &str, secret: &str) -> Option<String> {
        match self.caps.secrets.read(secret) {
            Ok(bytes) => match String::from_utf8(bytes) {
                // `kubectl create secret --from-file` keeps the file's newline.
                Ok(text) => Some(text.trim_end_matches(['\n', '\r']).to_string()),
                Err(_) => {
                    tracing::warn!(plugin = %self.caps.plugin, setting = %key, secret = %secret, "secret setting is not UTF-8; left unset");
                    None
                }
            },
            Err(e) => {
                tracing::warn!(plugin = %self.caps.plugin, setting = %key, error = %format!("{e:#}"), "secret setting unreadable; left unset");
                None
            }
        }
    }
}

impl Host for State {
    async fn get_setting(&mut self, key: String) -> Option<String> {
        let config = &self.caps.config;
        if let Some(secret) = config.secret_settings.get(&key) {
            return self.secret_setting(&key, secret);
        }
        config.settings.get(&key).cloned()
    }

    async fn settings(&mut self) -> Vec<(String, String)> {
        let config = self.caps.config.clone();
        let mut all: Vec<(String, String)> = config
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, secret) in &config.secret_settings {
            if let Some(value) = self.secret_setting(key, secret) {
                all.push((key.clone(), value));
            }
        }
        all.sort();
        all
    }

    async fn get_secret(&mut self, name: String) -> Result<Vec<u8>, String> {
        self.granted_secret(&name)
    }
}
