//! A UTC cron matcher for budget schedules: five fields (minute, hour, day of
//! month, month, day of week) or a descriptor, with the semantics of the cron
//! library Karpenter uses: `*`, `?`, lists, ranges, steps, month and weekday
//! names; when both day fields are restricted a day matches either.

/// A parsed schedule: one bit per allowed value of each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// A day field given as `*` or `?`: days then need both fields to match.
    dom_star: bool,
    dow_star: bool,
}

struct Field {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    min: 1,
    max: 31,
    names: &[],
};
/// Names start at the field's minimum.
const MONTH: Field = Field {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DAY_OF_WEEK: Field = Field {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

const MINUTE_SECS: i64 = 60;
const HOUR_SECS: i64 = 3_600;
const DAY_SECS: i64 = 86_400;
/// Give up looking for the next firing after this long (as the cron library
/// does): a schedule like "0 0 30 2 *" never fires.
const HORIZON_SECS: i64 = 5 * 366 * DAY_SECS;

impl Schedule {
    pub(crate) fn parse(spec: &str) -> Result<Schedule, String> {
        let spec = spec.trim();
        let expanded = match spec {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            s if s.starts_with('@') => return Err(format!("unknown descriptor {s:?}")),
            s => s,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(format!(
                "expected 5 fields, found {} in {spec:?}",
                fields.len()
            ));
        };
        let (minutes, _) = parse_field(minute, &MINUTE)?;
        let (hours, _) = parse_field(hour, &HOUR)?;
        let (days_of_month, dom_star) = parse_field(dom, &DAY_OF_MONTH)?;
        let (months, _) = parse_field(month, &MONTH)?;
        let (days_of_week, dow_star) = parse_field(dow, &DAY_OF_WEEK)?;
        Ok(Schedule {
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week,
            dom_star,
            dow_star,
        })
    }

    fn day_matches(&self, day_of_month: u32, day_of_week: u32) -> bool {
        let dom = has(self.days_of_month, day_of_month);
        let dow = has(self.days_of_week, day_of_week);
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first firing strictly after `t` (Unix seconds), if any within
    /// about five years.
    pub(crate) fn next_after(&self, t: i64) -> Option<i64> {
        let mut cur = (t.div_euclid(MINUTE_SECS) + 1) * MINUTE_SECS;
        let limit = cur.saturating_add(HORIZON_SECS);
        // Each step skips a whole month, day, hour or minute that cannot match,
        // so this ends quickly.
        while cur <= limit {
            let days = cur.div_euclid(DAY_SECS);
            let secs = cur.rem_euclid(DAY_SECS);
            let (year, month, day) = civil_from_days(days);
            if !has(self.months, month) {
                let (y, m) = if month == 12 {
                    (year + 1, 1)
                } else {
                    (year, month + 1)
                };
                cur = days_from_civil(y, m, 1) * DAY_SECS;
                continue;
            }
            if !self.day_matches(day, weekday(days)) {
                cur = (days + 1) * DAY_SECS;
                continue;
            }
            let hour = (secs / HOUR_SECS) as u32;
            if !has(self.hours, hour) {
                cur = days * DAY_SECS + i64::from(hour + 1) * HOUR_SECS;
                continue;
            }
            let minute = ((secs % HOUR_SECS) / MINUTE_SECS) as u32;
            if !has(self.minutes, minute) {
                cur += MINUTE_SECS;
                continue;
            }
            return Some(cur);
        }
        None
    }

    /// Whether a window of `duration_ms` opened at a firing is open at `now`
    /// (Unix seconds): the schedule fired in `(now - duration, now]`.
    pub(crate) fn active(&self, duration_ms: i64, now: i64) -> bool {
        let checkpoint_ms = now.saturating_mul(1000).saturating_sub(duration_ms);
        self.next_after(checkpoint_ms.div_euclid(1000))
            .is_some_and(|hit| hit <= now)
    }
}

fn has(bits: u64, v: u32) -> bool {
    v < 64 && bits & (1 << v) != 0
}

/// A comma-separated list of `*`, `?`, `a`, `a-b`, each with an optional
/// `/step` (`a/step` runs to the field's maximum). Returns the bits and
/// whether the field was an unstepped star.
fn parse_field(text: &str, f: &Field) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    for part in text.split(',') {
        let bad = |why: &str| format!("invalid cron field {text:?}: {why}");
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let (mut start, mut end, mut is_star) = if range == "*" || range == "?" {
            (f.min, f.max, true)
        } else {
            match range.split_once('-') {
                Some((a, b)) => (
                    value(a, f).ok_or_else(|| bad(a))?,
                    value(b, f).ok_or_else(|| bad(b))?,
                    false,
                ),
                None => {
                    let v = value(range, f).ok_or_else(|| bad(range))?;
                    (v, v, false)
                }
            }
        };
        let step = match step {
            None => 1,
            Some(s) => {
                let n: u32 = s.parse().map_err(|_| bad("step is not a number"))?;
                if !range.contains('-') && !is_star {
                    end = f.max;
                }
                if n > 1 {
                    is_star = false;
                }
                n
            }
        };
        if step == 0 {
            return Err(bad("step must be positive"));
        }
        if start < f.min || end > f.max || start > end {
            return Err(bad("out of range"));
        }
        while start <= end {
            bits |= 1 << start;
            start += step;
        }
        star |= is_star;
    }
    Ok((bits, star))
}

/// A number, or a name (case-insensitive) for months and weekdays.
fn value(s: &str, f: &Field) -> Option<u32> {
    if let Ok(n) = s.parse::<u32>() {
        return Some(n);
    }
    let lower = s.to_ascii_lowercase();
    f.names
        .iter()
        .position(|n| *n == lower)
        .map(|i| f.min + i as u32)
}

/// 1970-01-01 was a Thursday; Sunday is 0.
fn weekday(days: i64) -> u32 {
    (days + 4).rem_euclid(7) as u32
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix seconds of a UTC date and time.
    fn at(y: i64, mo: u32, d: u32, h: i64, mi: i64) -> i64 {
        days_from_civil(y, mo, d) * DAY_SECS + h * HOUR_SECS + mi * MINUTE_SECS
    }

    fn next(spec: &str, t: i64) -> Option<i64> {
        Schedule::parse(spec).unwrap().next_after(t)
    }

    #[test]
    fn calendar_round_trips() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(weekday(0), 4);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        for d in [-800_000, -1, 0, 59, 11_016, 19_782, 2_932_896] {
            let (y, m, day) = civil_from_days(d);
            assert_eq!(days_from_civil(y, m, day), d);
        }
        // 2024-02-29 exists, and was a Thursday.
        let leap = days_from_civil(2024, 2, 29);
        assert_eq!(civil_from_days(leap), (2024, 2, 29));
        assert_eq!(weekday(leap), 4);
    }

    #[test]
    fn fields_and_descriptors() {
        let t = at(2024, 5, 15, 10, 30); // a Wednesday
        assert_eq!(next("* * * * *", t), Some(t + 60));
        assert_eq!(next("0 * * * *", t), Some(at(2024, 5, 15, 11, 0)));
        assert_eq!(next("@hourly", t), Some(at(2024, 5, 15, 11, 0)));
        assert_eq!(next("@daily", t), Some(at(2024, 5, 16, 0, 0)));
        assert_eq!(next("@midnight", t), Some(at(2024, 5, 16, 0, 0)));
        assert_eq!(next("@weekly", t), Some(at(2024, 5, 19, 0, 0)));
        assert_eq!(next("@monthly", t), Some(at(2024, 6, 1, 0, 0)));
        assert_eq!(next("@yearly", t), Some(at(2025, 1, 1, 0, 0)));
        assert_eq!(next("@annually", t), Some(at(2025, 1, 1, 0, 0)));
        assert_eq!(
            next("*/15 9-17 * * mon-fri", t),
            Some(at(2024, 5, 15, 10, 45))
        );
        assert_eq!(next("0 9 * * SAT,sun", t), Some(at(2024, 5, 18, 9, 0)));
        assert_eq!(next("0 0 1 jan,JUL *", t), Some(at(2024, 7, 1, 0, 0)));
        assert_eq!(next("5/20 * * * *", t), Some(at(2024, 5, 15, 10, 45)));
        assert_eq!(next("0 22-23/1 * * *", t), Some(at(2024, 5, 15, 22, 0)));
        assert_eq!(next("0 0 29 2 *", t), Some(at(2028, 2, 29, 0, 0)));
        assert_eq!(next("0 0 30 2 *", t), None);
        // Strictly after: a firing at `t` itself is not "next".
        assert_eq!(next("30 10 * * *", t), Some(at(2024, 5, 16, 10, 30)));
    }

    #[test]
    fn restricted_day_fields_match_either() {
        let t = at(2024, 5, 15, 12, 0); // Wednesday the 15th
        // Both restricted: the 20th or any Friday, whichever comes first.
        assert_eq!(next("0 0 20 * 5", t), Some(at(2024, 5, 17, 0, 0)));
        // Day of week starred: only the 20th.
        assert_eq!(next("0 0 20 * *", t), Some(at(2024, 5, 20, 0, 0)));
        assert_eq!(next("0 0 20 * ?", t), Some(at(2024, 5, 20, 0, 0)));
        // A stepped star is a restriction, so either day field matches.
        assert_eq!(next("0 0 */10 * 5", t), Some(at(2024, 5, 17, 0, 0)));
    }

    #[test]
    fn rejects_malformed_schedules() {
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 7",
            "*/0 * * * *",
            "5-1 * * * *",
            "a * * * *",
            "* * * foo *",
            "@every 5m",
            "1,,2 * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn windows_open_at_each_firing_for_the_duration() {
        let s = Schedule::parse("0 9 * * *").unwrap();
        let nine = at(2024, 5, 15, 9, 0);
        let hour = 3_600_000;
        assert!(!s.active(hour, nine - 1));
        assert!(s.active(hour, nine));
        assert!(s.active(hour, nine + 3_599));
        // The window is [firing, firing + duration).
        assert!(!s.active(hour, nine + 3_600));
        assert!(s.active(24 * hour, nine + 23 * 3_600));
    }
}
