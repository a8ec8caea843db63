//! Go durations (one parser, in the vocabulary) as disruption counts time:
//! whole milliseconds.

use std::time::Duration;

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) fn parse(text: &str) -> Result<i64, String> {
    vocabulary::duration::parse(text)
        .map(millis)
        .map_err(|e| e.to_string())
}

/// `None` for "Never".
pub(crate) fn parse_or_never(text: &str) -> Result<Option<i64>, String> {
    vocabulary::duration::parse_or_never(text)
        .map(|d| d.map(millis))
        .map_err(|e| e.to_string())
}
