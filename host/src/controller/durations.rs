//! Durations as Kubernetes and Karpenter write them: Go's `1h30m`, `720h`,
//! `15s`, `1.5h`, `300ms`.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid duration {0:?}: expected e.g. 30s, 15m, 720h or 1h30m")]
pub struct InvalidDuration(pub String);

pub fn parse(text: &str) -> Result<Duration, InvalidDuration> {
    let bad = || InvalidDuration(text.to_string());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| bad())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Karpenter's optional durations: `Never` is none.
pub fn parse_or_never(text: &str) -> Result<Option<Duration>, InvalidDuration> {
    if text == "Never" {
        Ok(None)
    } else {
        parse(text).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_karpenter_users_write() {
        assert_eq!(parse("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_or_never("Never"), Ok(None));
    }

    #[test]
    fn rejects_what_kubernetes_would() {
        for bad in ["", "10", "h", "5d", "1h-5m", "-1s"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
