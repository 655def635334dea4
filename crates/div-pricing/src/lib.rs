//! The div catalogue, container sizing, rates, what a ceiling buys and metering; pure.
//!
//! [`Catalogue`] holds the prices and limits ([`Catalogue::standard`] is div-run.md's).
//! [`Catalogue::size`] turns a [`SizeRequest`] (`--gpu`, `--gpus`, `--cpu`, `--memory`) into
//! a [`Sizing`]: the container a run gets and its [`Rate`]. A rate says what a ceiling buys,
//! what has been spent after some seconds, and when a ceiling is reached, in exact integers.
//! [`header_line`] prints the line shown before a run's log. No I/O, no clock, no floats.
//!
//! ```
//! use div_pricing::{Catalogue, SizeRequest, header_line};
//! use div_spec::{MemoryGib, Money, Sku};
//!
//! let sizing = Catalogue::standard()
//!     .size(&SizeRequest { sku: Sku::H100, gpus: 1, cpu: Some(8), memory: Some(MemoryGib::new(64)) })
//!     .unwrap();
//! assert_eq!(sizing.rate.to_string(), "$7.82/h");
//! assert_eq!(
//!     header_line("run-k4t9", &sizing, None),
//!     "run-k4t9  H100 · 8 cores · 64 GiB  $7.82/h  no ceiling"
//! );
//! assert_eq!(sizing.rate.spend_after(760), Money::from_cents(165));
//! ```

mod rate;
mod sizing;

pub use rate::{Rate, RateError};
pub use sizing::{Catalogue, SizeRequest, Sizing, SizingError, SkuPrice, header_line};
