//! Dollar amounts as integer cents, read from the digits typed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An amount of money in whole cents, never negative.
///
/// Parsed from what a user types (`5`, `5.00`, `$5`, `5.005`) by reading the digits, never
/// through a float. Displayed as `$5.00`, with no thousands separators, so the display parses
/// back to the same value. Serialized as integer cents.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(try_from = "i64", into = "i64")]
pub struct Money {
    cents: i64,
}

impl Money {
    /// No money at all.
    pub const ZERO: Money = Money { cents: 0 };

    /// The amount of `cents` cents. A negative count is clamped to zero: money here is never
    /// negative. Use [`Money::try_from_cents`] to refuse it instead.
    pub const fn from_cents(cents: i64) -> Money {
        Money {
            cents: if cents < 0 { 0 } else { cents },
        }
    }

    /// The amount of `cents` cents, or `None` when `cents` is negative.
    pub const fn try_from_cents(cents: i64) -> Option<Money> {
        if cents < 0 {
            None
        } else {
            Some(Money { cents })
        }
    }

    /// The amount in cents.
    pub const fn cents(self) -> i64 {
        self.cents
    }

    /// The sum, or `None` on overflow.
    pub const fn checked_add(self, other: Money) -> Option<Money> {
        match self.cents.checked_add(other.cents) {
            Some(cents) => Some(Money { cents }),
            None => None,
        }
    }

    /// The difference, or zero when `other` is larger.
    pub const fn saturating_sub(self, other: Money) -> Money {
        Money::from_cents(self.cents.saturating_sub(other.cents))
    }

    /// Parses an amount like [`FromStr`] does, but accepts zero (`0`, `$0.00`): for amounts
    /// that are not a ceiling, such as a spend read back.
    pub fn parse_amount(typed: &str) -> Result<Money, MoneyError> {
        parse(typed)
    }
}

impl From<Money> for i64 {
    fn from(money: Money) -> i64 {
        money.cents
    }
}

impl TryFrom<i64> for Money {
    type Error = MoneyError;

    fn try_from(cents: i64) -> Result<Money, MoneyError> {
        Money::try_from_cents(cents).ok_or(MoneyError::NegativeCents { cents })
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}.{:02}", self.cents / 100, self.cents % 100)
    }
}

/// The error returned by [`Money::from_str`] and [`Money::parse_amount`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    /// Nothing was typed.
    #[error("the amount is empty; write dollars like `5` or `5.00`")]
    Empty,
    /// A minus sign.
    #[error("`{typed}` is negative; write a positive amount like `5.00`")]
    Negative { typed: String },
    /// A plus sign.
    #[error("`{typed}` has a sign; write the dollars alone, like `{hint}`")]
    Sign { typed: String, hint: String },
    /// Thousands separators.
    #[error("`{typed}` has a comma; write the dollars without separators, like `{hint}`")]
    Comma { typed: String, hint: String },
    /// Exponent notation.
    #[error("`{typed}` is in exponent notation; write the dollars out, like `5.00`")]
    Exponent { typed: String },
    /// More than three decimals.
    #[error(
        "`{typed}` has {decimals} decimals; money takes at most three (the third rounds half up to the cent)"
    )]
    TooManyDecimals { typed: String, decimals: usize },
    /// Anything else that is not dollars.
    #[error("`{typed}` is not an amount of dollars; write it like `5`, `5.00` or `$5`")]
    NotDollars { typed: String },
    /// Zero (or less than half a cent), refused as a ceiling.
    #[error(
        "`{typed}` is no money at all, and a ceiling of nothing would stop the run at once; write at least `0.01`"
    )]
    Zero { typed: String },
    /// More than an `i64` of cents.
    #[error("`{typed}` is too large an amount")]
    TooLarge { typed: String },
    /// Negative cents in serialized form.
    #[error("`{cents}` cents is negative; money is never negative")]
    NegativeCents { cents: i64 },
}

impl FromStr for Money {
    type Err = MoneyError;

    /// Parses a ceiling: `5`, `5.00`, `$5`, `.5`, `5.005` (rounds half up to `$5.01`).
    /// Surrounding whitespace is ignored. Zero is refused; see `docs/input-rules.md`.
    fn from_str(typed: &str) -> Result<Money, MoneyError> {
        let money = parse(typed)?;
        if money == Money::ZERO {
            return Err(MoneyError::Zero {
                typed: typed.trim().to_owned(),
            });
        }
        Ok(money)
    }
}

fn parse(raw: &str) -> Result<Money, MoneyError> {
    let typed = raw.trim();
    if typed.is_empty() {
        return Err(MoneyError::Empty);
    }
    let owned = || typed.to_owned();
    let body = typed.strip_prefix('$').unwrap_or(typed);
    if body.starts_with('-') || typed.starts_with('-') {
        return Err(MoneyError::Negative { typed: owned() });
    }
    if let Some(rest) = body.strip_prefix('+') {
        return Err(MoneyError::Sign {
            typed: owned(),
            hint: rest.to_owned(),
        });
    }
    if let Some(rest) = typed.strip_prefix('+') {
        return Err(MoneyError::Sign {
            typed: owned(),
            hint: rest.to_owned(),
        });
    }
    if body.contains(',') {
        let hint = body.replace(',', "");
        return Err(MoneyError::Comma {
            typed: owned(),
            hint,
        });
    }
    if body.contains(['e', 'E'])
        && body
            .chars()
            .all(|c| c.is_ascii_digit() || ".eE+-".contains(c))
    {
        return Err(MoneyError::Exponent { typed: owned() });
    }
    let not_dollars = || MoneyError::NotDollars { typed: owned() };
    let (whole, frac) = match body.split_once('.') {
        Some((w, f)) => (w, f),
        None => (body, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || !all_digits(frac) || (whole.is_empty() && frac.is_empty()) {
        return Err(not_dollars());
    }
    if frac.len() > 3 {
        return Err(MoneyError::TooManyDecimals {
            typed: owned(),
            decimals: frac.len(),
        });
    }
    let too_large = || MoneyError::TooLarge { typed: owned() };
    let mut cents: i64 = 0;
    for b in whole.bytes() {
        cents = cents
            .checked_mul(10)
            .and_then(|c| c.checked_add(i64::from(b - b'0')))
            .ok_or_else(too_large)?;
    }
    let mut digits = frac.bytes().map(|b| i64::from(b - b'0'));
    let tenths = digits.next().unwrap_or(0);
    let hundredths = digits.next().unwrap_or(0);
    let thousandths = digits.next().unwrap_or(0);
    let round_up = i64::from(thousandths >= 5);
    cents
        .checked_mul(100)
        .and_then(|c| c.checked_add(tenths * 10 + hundredths + round_up))
        .map(Money::from_cents)
        .ok_or_else(too_large)
}
