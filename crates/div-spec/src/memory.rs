//! Container memory in whole GiB.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An amount of memory in whole GiB (2^30 bytes), typed with `--memory`.
///
/// `64`, `64G` and `64GiB` (any case) are 64 GiB. Units that are not whole GiB (`512M`,
/// `64GB`, `1.5G`) are refused rather than rounded. Displayed as `64G`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryGib(u32);

impl MemoryGib {
    /// `gib` GiB. Zero is representable here; the parser refuses it.
    pub const fn new(gib: u32) -> MemoryGib {
        MemoryGib(gib)
    }

    /// The amount in GiB.
    pub const fn gib(self) -> u32 {
        self.0
    }
}

impl fmt::Display for MemoryGib {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}G", self.0)
    }
}

/// The error returned by [`MemoryGib::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// Nothing was typed.
    #[error("the memory size is empty; write whole GiB like `64G`")]
    Empty,
    /// Zero GiB.
    #[error("`{typed}` is no memory at all; write whole GiB like `64G`")]
    Zero { typed: String },
    /// A fraction.
    #[error("`{typed}` is not a whole number of GiB; memory is given in whole GiB, like `64G`")]
    Fraction { typed: String },
    /// Decimal gigabytes.
    #[error(
        "`{typed}` is {number}×10^9 bytes, not a whole number of GiB; write `{number}G` for {number} GiB"
    )]
    DecimalUnit { typed: String, number: String },
    /// A smaller unit.
    #[error(
        "`{typed}` is not a whole number of GiB; memory is given in whole GiB, like `64G`, and is not rounded up"
    )]
    SmallUnit { typed: String },
    /// A larger unit.
    #[error("`{typed}` is in a unit larger than GiB; write it in GiB, like `1024G`")]
    LargeUnit { typed: String },
    /// Anything else.
    #[error("`{typed}` is not a memory size; write whole GiB like `64`, `64G` or `64GiB`")]
    Invalid { typed: String },
    /// More than fits.
    #[error("`{typed}` is too large a memory size")]
    TooLarge { typed: String },
}

impl FromStr for MemoryGib {
    type Err = MemoryError;

    fn from_str(raw: &str) -> Result<MemoryGib, MemoryError> {
        let typed = raw.trim();
        if typed.is_empty() {
            return Err(MemoryError::Empty);
        }
        let owned = || typed.to_owned();
        let split = typed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(typed.len());
        let (number, unit) = typed.split_at(split);
        let unit_lower = unit.to_ascii_lowercase();
        let whole_gib_unit = matches!(unit_lower.as_str(), "" | "g" | "gib");
        let known_small = matches!(
            unit_lower.as_str(),
            "b" | "k" | "kb" | "kib" | "m" | "mb" | "mib"
        );
        let known_large = matches!(unit_lower.as_str(), "t" | "tb" | "tib" | "p" | "pb" | "pib");
        if number.is_empty() || number.starts_with('.') && number.len() == 1 {
            return Err(MemoryError::Invalid { typed: owned() });
        }
        if number.contains('.') {
            let valid = number.matches('.').count() == 1 && number != ".";
            if valid && (whole_gib_unit || unit_lower == "gb" || known_small || known_large) {
                return Err(MemoryError::Fraction { typed: owned() });
            }
            return Err(MemoryError::Invalid { typed: owned() });
        }
        if unit_lower == "gb" {
            return Err(MemoryError::DecimalUnit {
                typed: owned(),
                number: number.to_owned(),
            });
        }
        if known_small {
            return Err(MemoryError::SmallUnit { typed: owned() });
        }
        if known_large {
            return Err(MemoryError::LargeUnit { typed: owned() });
        }
        if !whole_gib_unit {
            return Err(MemoryError::Invalid { typed: owned() });
        }
        let gib: u32 = number
            .parse()
            .map_err(|_| MemoryError::TooLarge { typed: owned() })?;
        if gib == 0 {
            return Err(MemoryError::Zero { typed: owned() });
        }
        Ok(MemoryGib(gib))
    }
}
