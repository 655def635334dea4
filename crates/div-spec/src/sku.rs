//! The kinds of hardware a run can ask for.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A SKU: the hardware a run is placed on, typed with `--gpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sku {
    /// NVIDIA B300.
    B300,
    /// NVIDIA H200.
    H200,
    /// NVIDIA H100, the default.
    H100,
    /// No GPU: a container of cores and memory.
    Cpu,
}

impl Sku {
    /// Every SKU, in the order the docs list them.
    pub const ALL: [Sku; 4] = [Sku::B300, Sku::H200, Sku::H100, Sku::Cpu];

    /// The name typed with `--gpu`: `h100`.
    pub fn name(self) -> &'static str {
        match self {
            Sku::B300 => "b300",
            Sku::H200 => "h200",
            Sku::H100 => "h100",
            Sku::Cpu => "cpu",
        }
    }

    /// The name printed for people: `H100`, `CPU`.
    pub fn label(self) -> &'static str {
        match self {
            Sku::B300 => "B300",
            Sku::H200 => "H200",
            Sku::H100 => "H100",
            Sku::Cpu => "CPU",
        }
    }

    /// Whether the SKU is a GPU (every one but `cpu`).
    pub fn is_gpu(self) -> bool {
        self != Sku::Cpu
    }
}

impl fmt::Display for Sku {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Sku {
    type Err = UnknownSku;

    /// Case-insensitive: `h100` and `H100` are the same SKU.
    fn from_str(typed: &str) -> Result<Sku, UnknownSku> {
        Sku::ALL
            .into_iter()
            .find(|sku| sku.name().eq_ignore_ascii_case(typed))
            .ok_or_else(|| {
                let names: Vec<&str> = Sku::ALL.iter().map(|s| s.name()).collect();
                UnknownSku::with_accepted(typed, &names)
            })
    }
}

/// The error returned by [`Sku::from_str`]: the name typed is not a SKU.
///
/// `accepted` lists the names that would be accepted; the CLI fills it from the control
/// plane's catalogue with [`UnknownSku::with_accepted`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown SKU `{typed}`; expected one of {}", .accepted.join(", "))]
pub struct UnknownSku {
    /// What was typed.
    pub typed: String,
    /// The names accepted.
    pub accepted: Vec<String>,
}

impl UnknownSku {
    /// The error for `typed`, listing `accepted`.
    pub fn with_accepted(typed: &str, accepted: &[&str]) -> Self {
        UnknownSku {
            typed: typed.to_owned(),
            accepted: accepted.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}
