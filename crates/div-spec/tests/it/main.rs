//! div-spec's integration tests: every example of div-run.md and runtime.md this crate
//! touches, every refusal message, and property tests.

mod check;
mod entrypoint;
mod fuzz_regressions;
mod human;
mod memory;
mod model;
mod money;
mod proptests;
mod sku;
mod slug_env_volume;

use std::fmt::Display;
use std::str::FromStr;

/// The message `typed` is refused with.
pub(crate) fn refused<T>(typed: &str) -> String
where
    T: FromStr + std::fmt::Debug,
    T::Err: Display,
{
    match typed.parse::<T>() {
        Ok(value) => panic!("`{typed}` parsed as {value:?}, expected a refusal"),
        Err(e) => e.to_string(),
    }
}
