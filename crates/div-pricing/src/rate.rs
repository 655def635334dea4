//! Hourly rates, prorated spend and ceilings, in exact integers.

use std::fmt;
use std::str::FromStr;

use div_spec::Money;
use serde::{Deserialize, Serialize};

/// What a run costs an hour, in cents. Displayed as `$4.95/h`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Rate {
    cents_per_hour: i64,
}

impl Rate {
    /// A rate of `c` cents an hour. A negative rate is clamped to zero.
    pub const fn from_cents_per_hour(c: i64) -> Rate {
        Rate {
            cents_per_hour: if c < 0 { 0 } else { c },
        }
    }

    /// Cents an hour.
    pub const fn cents_per_hour(self) -> i64 {
        self.cents_per_hour
    }

    /// Spend after `seconds`, prorated to the second in exact integers, rounded half up to
    /// the cent: 760 s at 495 cents an hour is 104.5 cents, so 105 ($1.05).
    pub fn spend_after(self, seconds: u64) -> Money {
        let exact_times_3600 = i128::from(self.cents_per_hour) * i128::from(seconds);
        let cents = (exact_times_3600 + 1800) / 3600;
        Money::from_cents(i64::try_from(cents).unwrap_or(i64::MAX))
    }

    /// What a run is charged after `seconds`: [`Rate::spend_after`], but never more than its
    /// ceiling. The meter stops a run in the second its ceiling is reached, and that second's
    /// fraction of a cent past the ceiling is not charged.
    pub fn charge(self, seconds: u64, ceiling: Option<Money>) -> Money {
        let spend = self.spend_after(seconds);
        match ceiling {
            Some(ceiling) => spend.min(ceiling),
            None => spend,
        }
    }

    /// Whole seconds the ceiling buys, rounded down: $5.00 at $4.95/h buys 3636 s. A zero
    /// rate buys forever (`u64::MAX`).
    pub fn ceiling_buys(self, ceiling: Money) -> u64 {
        if self.cents_per_hour == 0 {
            return u64::MAX;
        }
        let seconds = i128::from(ceiling.cents()) * 3600 / i128::from(self.cents_per_hour);
        u64::try_from(seconds).unwrap_or(u64::MAX)
    }

    /// Whether `seconds` of running has reached the ceiling, exactly:
    /// `rate × seconds ≥ ceiling × 3600`.
    pub fn ceiling_reached(self, ceiling: Money, seconds: u64) -> bool {
        i128::from(self.cents_per_hour) * i128::from(seconds) >= i128::from(ceiling.cents()) * 3600
    }

    /// The first whole second at which [`Rate::ceiling_reached`] is true, or `None` for a zero
    /// rate (never reached).
    pub fn ceiling_reached_at(self, ceiling: Money) -> Option<u64> {
        if self.cents_per_hour == 0 {
            return None;
        }
        let need = i128::from(ceiling.cents()) * 3600;
        let rate = i128::from(self.cents_per_hour);
        let seconds = (need + rate - 1) / rate;
        Some(u64::try_from(seconds).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/h", Money::from_cents(self.cents_per_hour))
    }
}

/// The error returned by [`Rate::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{typed}` is not an hourly rate; write it like `$4.95/h`")]
pub struct RateError {
    /// What was typed.
    pub typed: String,
}

impl FromStr for Rate {
    type Err = RateError;

    /// `$4.95/h` (the `/h` may be left off); `$0.00/h` is a zero rate.
    fn from_str(typed: &str) -> Result<Rate, RateError> {
        let trimmed = typed.trim();
        let amount = trimmed.strip_suffix("/h").unwrap_or(trimmed);
        Money::parse_amount(amount)
            .map(|m| Rate::from_cents_per_hour(m.cents()))
            .map_err(|_| RateError {
                typed: typed.to_owned(),
            })
    }
}
