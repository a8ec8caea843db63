//! Go duration strings ("30s", "1h30m", "1.5h", "720h"), as Kubernetes
//! objects carry them, parsed into milliseconds.

const NANOS_PER_MILLI: i128 = 1_000_000;

/// A duration in milliseconds, or `None` for "Never".
pub(crate) fn parse_or_never(s: &str) -> Result<Option<i64>, String> {
    if s.trim() == "Never" {
        return Ok(None);
    }
    parse(s).map(Some)
}

/// Parses a Go duration into milliseconds (sub-millisecond parts dropped).
pub(crate) fn parse(input: &str) -> Result<i64, String> {
    let bad = |why: &str| format!("invalid duration {input:?}: {why}");
    let s = input.trim();
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(bad("expected a number"));
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("missing unit")),
            _ => return Err(bad("unknown unit")),
        };
        if whole.len() + fraction.len() > 30 {
            return Err(bad("too many digits"));
        }
        let mut value: i128 = 0;
        for b in whole.bytes() {
            value = value * 10 + i128::from(b - b'0');
        }
        let mut nanos = value * scale;
        let mut div: i128 = 1;
        let mut frac: i128 = 0;
        for b in fraction.bytes().take(18) {
            frac = frac * 10 + i128::from(b - b'0');
            div *= 10;
        }
        nanos += frac * scale / div;
        total += nanos;
        if total > i128::from(i64::MAX) * NANOS_PER_MILLI {
            return Err(bad("out of range"));
        }
        rest = next;
    }
    let millis = (total / NANOS_PER_MILLI) as i64;
    Ok(if negative { -millis } else { millis })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("0s"), Ok(0));
        assert_eq!(parse("30s"), Ok(30_000));
        assert_eq!(parse("1h30m"), Ok(5_400_000));
        assert_eq!(parse("1.5h"), Ok(5_400_000));
        assert_eq!(parse("720h"), Ok(720 * 3_600_000));
        assert_eq!(parse("250ms"), Ok(250));
        assert_eq!(parse(".5s"), Ok(500));
        assert_eq!(parse("1m0.5s"), Ok(60_500));
        assert_eq!(parse("-2m"), Ok(-120_000));
        assert_eq!(parse("1500us"), Ok(1));
        for bad in ["", "5", "s", "1x", "1..5s", "h1", "1h 2m", "--1s"] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(parse_or_never("Never"), Ok(None));
        assert_eq!(parse_or_never("10m"), Ok(Some(600_000)));
    }
}
