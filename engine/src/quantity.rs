//! Kubernetes quantity strings ("100m", "1.5", "4Gi", "1e3") to integers.
//!
//! The engine works in canonical integer units: milli-units for `cpu`, whole
//! units (bytes, counts) for everything else. Like Kubernetes' `MilliValue` and
//! `Value`, fractions are rounded up.

use std::fmt;

use vocabulary::resources::CPU;

/// A parsed quantity, held in thousandths of a unit (rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    millis: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    input: String,
    why: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.input, self.why)
    }
}

impl std::error::Error for QuantityError {}

impl Quantity {
    pub fn from_millis(millis: i64) -> Self {
        Quantity { millis }
    }

    /// Thousandths of a unit, rounded up.
    pub fn milli_value(self) -> i64 {
        self.millis
    }

    /// Whole units, rounded up.
    pub fn value(self) -> i64 {
        self.millis.div_euclid(1000) + i64::from(self.millis.rem_euclid(1000) != 0)
    }

    /// The amount in the engine's canonical unit for `resource`: millis for
    /// `cpu`, whole units otherwise.
    pub fn canonical(self, resource: &str) -> i64 {
        if resource == CPU {
            self.milli_value()
        } else {
            self.value()
        }
    }

    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        parse(input).map_err(|why| QuantityError {
            input: input.to_string(),
            why,
        })
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// Parses `input` and returns it in the canonical unit for `resource`.
pub fn parse_resource(resource: &str, input: &str) -> Result<i64, QuantityError> {
    Quantity::parse(input).map(|q| q.canonical(resource))
}

fn parse(input: &str) -> Result<Quantity, &'static str> {
    let s = input.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err("no number");
    }
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => {
            if f.contains('.') {
                return Err("more than one decimal point");
            }
            (w, f)
        }
        None => (number, ""),
    };
    let digits = whole.len() + fraction.len();
    if digits > 30 {
        return Err("too many digits");
    }
    let mut mantissa: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa * 10 + i128::from(b - b'0');
    }
    // value = mantissa * 2^bin * 10^(dec - fraction digits)
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))
                .ok_or("unknown suffix")?;
            let exp: i32 = exp.parse().map_err(|_| "bad exponent")?;
            if !(-30..=30).contains(&exp) {
                return Err("exponent out of range");
            }
            (0, exp)
        }
    };
    // In thousandths: multiply by 1000, i.e. add 3 to the decimal exponent.
    let exp10 = dec + 3 - fraction.len() as i32;
    let mut scaled = mantissa
        .checked_mul(1i128 << bin)
        .ok_or("quantity too large")?;
    if exp10 >= 0 {
        scaled = scaled
            .checked_mul(
                10i128
                    .checked_pow(exp10 as u32)
                    .ok_or("quantity too large")?,
            )
            .ok_or("quantity too large")?;
    } else {
        let div = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or("quantity too small")?;
        // Round up, away from zero for positive values, as Kubernetes does.
        scaled = scaled / div + i128::from(scaled % div != 0);
    }
    if negative {
        scaled = -scaled;
    }
    let millis = i64::try_from(scaled).map_err(|_| "quantity too large")?;
    Ok(Quantity { millis })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i64 {
        Quantity::parse(s).unwrap().milli_value()
    }

    fn value(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value()
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("0.1"), 100);
        assert_eq!(milli("250m"), 250);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("2k"), 2_000_000);
        // Below a milli rounds up, like Kubernetes' MilliValue.
        assert_eq!(milli("1n"), 1);
        assert_eq!(milli("1500u"), 2);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(value("4Gi"), 4 * 1024 * 1024 * 1024);
        assert_eq!(value("512Mi"), 512 * 1024 * 1024);
        assert_eq!(value("128974848"), 128_974_848);
        assert_eq!(value("10G"), 10_000_000_000);
        assert_eq!(value("1.5Gi"), 1_610_612_736);
        assert_eq!(value("129e6"), 129_000_000);
        assert_eq!(value("1Ki"), 1024);
        assert_eq!(value("100Mi"), 104_857_600);
        // Fractions of a byte round up.
        assert_eq!(value("100m"), 1);
    }

    #[test]
    fn canonical_units_by_resource() {
        assert_eq!(parse_resource("cpu", "1.5").unwrap(), 1500);
        assert_eq!(parse_resource("memory", "1Mi").unwrap(), 1_048_576);
        assert_eq!(parse_resource("nvidia.com/gpu", "2").unwrap(), 2);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "abc",
            "1.2.3",
            "1Qi",
            "1e",
            "1e99",
            ".",
            "Gi",
            "99999999999999999999999Ei",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn negative_values() {
        assert_eq!(milli("-100m"), -100);
        assert_eq!(value("-1Ki"), -1024);
    }
}
