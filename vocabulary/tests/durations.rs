//! The Go-duration parser against Go itself: `go_durations.jsonl` is Go's
//! `time.ParseDuration` answering thousands of inputs (see `go/main.go`), and
//! the properties below cover the grammar beyond that sample.

use proptest::prelude::*;
use vocabulary::duration::{self, Reason};

#[test]
fn agrees_with_go_on_every_recorded_case() {
    let recorded = include_str!("go_durations.jsonl");
    let mut checked = 0;
    for line in recorded.lines() {
        let case: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let input = case["in"].as_str().expect("an input");
        let ours = duration::parse_nanos(input);
        match (case["nanos"].as_i64(), case["error"].as_str()) {
            (Some(nanos), _) => assert_eq!(ours, Ok(nanos), "{input:?}"),
            (None, Some(error)) => {
                let reason = ours.map_err(|e| e.reason);
                let expected = if error.starts_with("time: missing unit") {
                    Reason::MissingUnit
                } else if let Some(rest) = error.strip_prefix("time: unknown unit ") {
                    // Compare units the way Go prints them.
                    let quoted = rest.rsplit_once(" in duration").map_or(rest, |(u, _)| u);
                    match &reason {
                        Err(Reason::UnknownUnit(u)) if go_quote(u) == quoted => {
                            Reason::UnknownUnit(u.clone())
                        }
                        _ => Reason::UnknownUnit(quoted.to_string()),
                    }
                } else {
                    Reason::Malformed
                };
                assert_eq!(reason, Err(expected), "{input:?}: Go said {error}");
            }
            _ => panic!("a case needs nanos or an error: {line}"),
        }
        checked += 1;
    }
    assert!(checked > 3000, "only {checked} cases");
}

/// Go's `time.quote`: non-ASCII and control bytes as `\xHH`.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if (c as u32) < 0x20 || (c as u32) >= 0x80 {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

const UNITS: [(&str, i128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

proptest! {
    /// Whole numbers with units sum exactly, and out of range is an error,
    /// never a wrapped value.
    #[test]
    fn whole_components_sum_exactly(
        negative in any::<bool>(),
        parts in prop::collection::vec((0u64..100_000_000_000, 0usize..UNITS.len()), 1..4),
    ) {
        let text: String = std::iter::once(if negative { "-" } else { "" }.to_string())
            .chain(parts.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)))
            .collect();
        let sum: i128 = parts.iter().map(|(n, u)| i128::from(*n) * UNITS[*u].1).sum();
        let expected = if negative { -sum } else { sum };
        match i64::try_from(expected) {
            Ok(nanos) => prop_assert_eq!(duration::parse_nanos(&text), Ok(nanos)),
            Err(_) => prop_assert!(duration::parse_nanos(&text).is_err()),
        }
    }

    /// A fraction never adds a whole unit or more, and adds nothing when
    /// its digits are zeros.
    #[test]
    fn fractions_stay_within_their_unit(
        whole in 0u64..1_000_000,
        digits in "[0-9]{1,25}",
        u in 0usize..UNITS.len(),
    ) {
        let (unit, scale) = UNITS[u];
        let nanos = i128::from(duration::parse_nanos(&format!("{whole}.{digits}{unit}")).expect("valid"));
        let base = i128::from(whole) * scale;
        prop_assert!(nanos >= base && nanos <= base + scale, "{nanos} vs {base}");
        if digits.bytes().all(|b| b == b'0') {
            prop_assert_eq!(nanos, base);
        }
    }

    /// Any text at all: an answer, never a panic; a non-negative answer
    /// means the same through `parse`.
    #[test]
    fn any_text_gets_an_answer(text in "[-+0-9.a-zµμ ]{0,16}|\\PC{0,12}") {
        match duration::parse_nanos(&text) {
            Ok(n) if n >= 0 => prop_assert_eq!(
                duration::parse(&text).map(|d| d.as_nanos()),
                Ok(n as u128)
            ),
            Ok(_) => prop_assert_eq!(duration::parse(&text).map_err(|e| e.reason), Err(Reason::Negative)),
            Err(e) => prop_assert!(duration::parse(&text).is_err(), "{e}"),
        }
    }
}
