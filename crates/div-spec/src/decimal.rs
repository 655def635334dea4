//! Exact comparison of decimal numbers written as text (`0.8`, `-1.5e-3`), never via floats.

use std::cmp::Ordering;

/// A decimal `digits × 10^exp`, with no leading or trailing zeros in `digits` (zero is empty).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i128,
}

impl Decimal {
    /// Reads `-?digits(.digits)?([eE][+-]?digits)?`, as JSON and checks write numbers.
    /// Leading `+` and a bare `.5` or `5.` are not accepted.
    pub(crate) fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (whole, frac) = match mantissa.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (mantissa, None),
        };
        let digits_only = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits_only(whole) || frac.is_some_and(|f| !digits_only(f)) {
            return None;
        }
        let mut exp: i128 = match exponent {
            None => 0,
            Some(e) => {
                let (neg, body) = match e.strip_prefix('-') {
                    Some(b) => (true, b),
                    None => (false, e.strip_prefix('+').unwrap_or(e)),
                };
                if !digits_only(body) {
                    return None;
                }
                // Saturate absurd exponents; they still order correctly.
                let value = body
                    .trim_start_matches('0')
                    .parse::<i64>()
                    .map(i128::from)
                    .unwrap_or(if body.trim_start_matches('0').is_empty() {
                        0
                    } else {
                        i128::from(i64::MAX)
                    });
                if neg { -value } else { value }
            }
        };
        let frac = frac.unwrap_or("");
        exp -= frac.len() as i128;
        let mut digits: Vec<u8> = whole
            .bytes()
            .chain(frac.bytes())
            .map(|b| b - b'0')
            .skip_while(|d| *d == 0)
            .collect();
        while digits.last() == Some(&0) {
            digits.pop();
            exp += 1;
        }
        if digits.is_empty() {
            return Some(Decimal {
                negative: false,
                digits,
                exp: 0,
            });
        }
        Some(Decimal {
            negative,
            digits,
            exp,
        })
    }

    fn magnitude_cmp(&self, other: &Decimal) -> Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        let top = |d: &Decimal| d.digits.len() as i128 + d.exp;
        top(self)
            .cmp(&top(other))
            .then_with(|| self.digits.cmp(&other.digits))
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.magnitude_cmp(other),
            (true, true) => other.magnitude_cmp(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Decimal;
    use std::cmp::Ordering;

    fn check(a: &str, b: &str, expect: Ordering) {
        let (x, y) = (Decimal::parse(a).unwrap(), Decimal::parse(b).unwrap());
        assert_eq!(x.cmp(&y), expect, "{a} vs {b}");
    }

    #[test]
    fn orders_exactly() {
        use Ordering::*;
        check("0.8", "0.8", Equal);
        check("0.80", "0.8", Equal);
        check("0.1", "1e-1", Equal);
        check("0.91", "0.8", Greater);
        check("0.71", "0.6", Greater);
        check("-1", "0", Less);
        check("-0", "0", Equal);
        check("-2", "-1.5", Less);
        check("100", "1e2", Equal);
        check("99.999", "1E+2", Less);
        check("0.30000000000000004", "0.3", Greater);
        check("0", "0.000", Equal);
        check("12", "9", Greater);
    }

    #[test]
    fn refuses_non_numbers() {
        for text in [
            "", "-", ".5", "5.", "+5", "1e", "1e+", "0x10", "1_000", "NaN", "--1",
        ] {
            assert_eq!(Decimal::parse(text), None, "{text}");
        }
    }
}
