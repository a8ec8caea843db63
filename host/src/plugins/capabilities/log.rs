//! `karpenter:provider/log`: plugin logs in the host's `tracing`, tagged with
//! the plugin's name.

use crate::plugins::bindings::v0_1_0::karpenter::provider::log::{Host, Level};
use crate::plugins::state::State;

/// Fields beyond this are dropped: a plugin must not flood the logs.
const MAX_FIELDS: usize = 32;

impl Host for State {
    async fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let plugin = &*self.caps.plugin;
        let fields: String = fields
            .iter()
            .take(MAX_FIELDS)
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        match level {
            Level::Trace => tracing::trace!(plugin, fields, "{message}"),
            Level::Debug => tracing::debug!(plugin, fields, "{message}"),
            Level::Info => tracing::info!(plugin, fields, "{message}"),
            Level::Warn => tracing::warn!(plugin, fields, "{message}"),
            Level::Error => tracing::error!(plugin, fields, "{message}"),
        }
    }
}
