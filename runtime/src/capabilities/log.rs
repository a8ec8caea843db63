//! `karpenter:provider/log`: plugin logs in the host's `tracing`, tagged with
//! the plugin's name. A plugin must not flood the logs or the host's memory:
//! messages and fields are cut to a size, and lines beyond a rate are
//! dropped and counted, the count reported once lines flow again.

use crate::bindings::v0_1_4::karpenter::provider::log::{Host, Level};
use crate::state::State;
use std::sync::Mutex;
use std::time::Instant;

/// Fields beyond this are dropped.
const MAX_FIELDS: usize = 32;
/// A message, a field's key or a field's value is cut past this.
const MAX_MESSAGE_BYTES: usize = 4 << 10;
const MAX_KEY_BYTES: usize = 128;
const MAX_VALUE_BYTES: usize = 1 << 10;
/// Lines per second a plugin may log on average, and in one burst.
const LINES_PER_SECOND: f64 = 50.0;
const BURST: f64 = 500.0;

/// One plugin's log rate: a token bucket shared by all its instances.
pub struct LogLimiter {
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    at: Option<Instant>,
    dropped: u64,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter {
            bucket: Mutex::new(Bucket {
                tokens: BURST,
                at: None,
                dropped: 0,
            }),
        }
    }
}

/// Whether a line may be written, and how many were dropped before it.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Write { dropped_before: u64 },
    Drop,
}

impl LogLimiter {
    pub fn admit(&self, now: Instant) -> Admit {
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = b.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * LINES_PER_SECOND;
            b.tokens = (b.tokens + refill).min(BURST);
        }
        b.at = Some(now);
        if b.tokens < 1.0 {
            b.dropped += 1;
            return Admit::Drop;
        }
        b.tokens -= 1.0;
        Admit::Write {
            dropped_before: std::mem::take(&mut b.dropped),
        }
    }

    /// A host-side warning about the plugin (a refused cache entry), under
    /// the same rate as its own lines.
    pub fn warn_refused(&self, plugin: &str, key: &str, why: &str) {
        if let Admit::Write { dropped_before } = self.admit(Instant::now()) {
            report_dropped(plugin, dropped_before);
            tracing::warn!(
                plugin,
                key = cut(key, MAX_KEY_BYTES),
                "cache entry refused: {why}"
            );
        }
    }

    /// What the guest wrote to stderr during a call (a panic's message, a
    /// traceback), under the same rate as its own lines.
    pub fn guest_stderr(&self, plugin: &str, call: &str, text: &str) {
        if let Admit::Write { dropped_before } = self.admit(Instant::now()) {
            report_dropped(plugin, dropped_before);
            tracing::warn!(plugin, call, stderr = text, "plugin wrote to stderr");
        }
    }
}

fn report_dropped(plugin: &str, dropped: u64) {
    if dropped > 0 {
        tracing::warn!(
            plugin,
            dropped,
            "plugin log lines dropped: more than {LINES_PER_SECOND} a second"
        );
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Host for State {
    async fn log(&mut self, level: Level, message: String, fields: Vec<(String, String)>) {
        let plugin = &*self.caps.plugin;
        let Admit::Write { dropped_before } = self.caps.log.admit(Instant::now()) else {
            return;
        };
        report_dropped(plugin, dropped_before);
        let truncated = message.len() > MAX_MESSAGE_BYTES;
        let message = cut(&message, MAX_MESSAGE_BYTES);
        let message = if truncated {
            format!("{message}… (cut at {MAX_MESSAGE_BYTES} bytes)")
        } else {
            message.to_string()
        };
        let fields: String = fields
            .iter()
            .take(MAX_FIELDS)
            .map(|(k, v)| format!("{}={:?}", cut(k, MAX_KEY_BYTES), cut(v, MAX_VALUE_BYTES)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_flood_is_cut_to_the_burst_then_the_rate_and_the_drops_are_counted() {
        let limiter = LogLimiter::default();
        let t0 = Instant::now();
        let written = (0..10_000)
            .filter(|_| matches!(limiter.admit(t0), Admit::Write { .. }))
            .count();
        assert_eq!(written, BURST as usize);
        // A second later, a second's worth of lines, the first reporting the drops.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            limiter.admit(t1),
            Admit::Write {
                dropped_before: 10_000 - BURST as u64
            }
        );
        let more = (0..1_000)
            .filter(|_| matches!(limiter.admit(t1), Admit::Write { .. }))
            .count();
        assert_eq!(more, LINES_PER_SECOND as usize - 1);
    }

    #[test]
    fn cutting_keeps_whole_characters() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("short", 100), "short");
    }
}
