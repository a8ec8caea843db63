//! Go durations ("30s", "1h30m", "1.5h", "720h"), as Kubernetes objects and
//! Karpenter's settings carry them. One parser, with the semantics of Go's
//! `time.ParseDuration` (which `metav1.Duration` uses) down to the
//! nanosecond, overflow and error cases included; `tests/go_durations.rs`
//! holds it to Go's own answers.

use std::fmt;
use std::time::Duration;

/// Why a duration did not parse, with the text as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidDuration {
    pub text: String,
    pub reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Go's "invalid duration": empty, no digits, or out of range.
    Malformed,
    MissingUnit,
    UnknownUnit(String),
    /// Valid for Go, but a timeout or a lifetime cannot be negative.
    Negative,
}

impl fmt::Display for InvalidDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = &self.text;
        match &self.reason {
            Reason::Malformed => write!(f, "invalid duration {text:?}"),
            Reason::MissingUnit => write!(f, "missing unit in duration {text:?}"),
            Reason::UnknownUnit(u) => write!(f, "unknown unit {u:?} in duration {text:?}"),
            Reason::Negative => write!(f, "negative duration {text:?}"),
        }?;
        f.write_str(" (expected e.g. 30s, 15m, 720h or 1h30m)")
    }
}

impl std::error::Error for InvalidDuration {}

const SIGN_BIT: u64 = 1 << 63;

fn unit(u: &str) -> Option<u64> {
    Some(match u {
        "ns" => 1,
        // Go accepts both micro signs: U+00B5 and U+03BC.
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Nanoseconds, signed, exactly as Go's `time.ParseDuration` returns them.
pub fn parse_nanos(text: &str) -> Result<i64, InvalidDuration> {
    let fail = |reason| InvalidDuration {
        text: text.to_string(),
        reason,
    };
    let mut s = text.as_bytes();
    let mut negative = false;
    if let Some(&c @ (b'-' | b'+')) = s.first() {
        negative = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(fail(Reason::Malformed));
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(fail(Reason::Malformed));
        }
        let (whole, rest) = leading_int(s).ok_or_else(|| fail(Reason::Malformed))?;
        let had_whole = rest.len() != s.len();
        s = rest;
        let (mut fraction, mut scale, mut had_fraction) = (0u64, 1f64, false);
        if let Some(rest) = s.strip_prefix(b".") {
            let (f, sc, after) = leading_fraction(rest);
            (fraction, scale, had_fraction) = (f, sc, after.len() != rest.len());
            s = after;
        }
        if !had_whole && !had_fraction {
            return Err(fail(Reason::Malformed));
        }
        let unit_len = s
            .iter()
            .position(|c| *c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(fail(Reason::MissingUnit));
        }
        // The unit ends at an ASCII byte, so this is a char boundary.
        let name = String::from_utf8_lossy(&s[..unit_len]).into_owned();
        s = &s[unit_len..];
        let scale_ns = unit(&name).ok_or_else(|| fail(Reason::UnknownUnit(name)))?;
        if whole > SIGN_BIT / scale_ns {
            return Err(fail(Reason::Malformed));
        }
        let mut v = whole * scale_ns;
        if fraction > 0 {
            // Go computes the fraction in float64; so do we, to agree with
            // it to the nanosecond.
            v += (fraction as f64 * (scale_ns as f64 / scale)) as u64;
            if v > SIGN_BIT {
                return Err(fail(Reason::Malformed));
            }
        }
        // Go adds in uint64 and may wrap here; agreeing with it matters more
        // than fixing a case no one writes.
        total = total.wrapping_add(v);
        if total > SIGN_BIT {
            return Err(fail(Reason::Malformed));
        }
    }
    if negative {
        return Ok((total as i64).wrapping_neg());
    }
    i64::try_from(total).map_err(|_| fail(Reason::Malformed))
}

fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while let Some(c) = s.get(i).filter(|c| c.is_ascii_digit()) {
        if x > SIGN_BIT / 10 {
            return None;
        }
        x = x * 10 + u64::from(c - b'0');
        if x > SIGN_BIT {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

/// Digits after the point: precision stops accumulating at overflow, the
/// digits are still consumed.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while let Some(c) = s.get(i).filter(|c| c.is_ascii_digit()) {
        i += 1;
        if overflow {
            continue;
        }
        if x > (SIGN_BIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > SIGN_BIT {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[i..])
}

/// A non-negative Go duration: timeouts, lifetimes, grace periods.
pub fn parse(text: &str) -> Result<Duration, InvalidDuration> {
    let nanos = parse_nanos(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| InvalidDuration {
            text: text.to_string(),
            reason: Reason::Negative,
        })
}

/// Karpenter's optional durations, where `Never` is none.
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
        let secs = Duration::from_secs;
        assert_eq!(parse("720h"), Ok(secs(720 * 3600)));
        assert_eq!(parse("1h30m"), Ok(secs(5400)));
        assert_eq!(parse("1.5h"), Ok(secs(5400)));
        assert_eq!(parse("15s"), Ok(secs(15)));
        assert_eq!(parse("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_or_never("Never"), Ok(None));
        assert_eq!(parse_or_never("10m"), Ok(Some(secs(600))));
    }

    #[test]
    fn refusals_say_why() {
        let reason = |s| parse(s).map_err(|e| e.reason);
        assert_eq!(reason("10"), Err(Reason::MissingUnit));
        assert_eq!(reason("5d"), Err(Reason::UnknownUnit("d".into())));
        assert_eq!(reason("1h 5m"), Err(Reason::UnknownUnit("h ".into())));
        assert_eq!(reason("-1s"), Err(Reason::Negative));
        assert_eq!(reason(" 1s"), Err(Reason::Malformed));
        assert_eq!(reason(""), Err(Reason::Malformed));
        assert_eq!(
            parse("5d").err().map(|e| e.to_string()).unwrap_or_default(),
            "unknown unit \"d\" in duration \"5d\" (expected e.g. 30s, 15m, 720h or 1h30m)"
        );
    }
}
