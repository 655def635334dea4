//! Pure parsing and printing of what a div user types: entrypoints, checks, money, memory,
//! SKUs, durations, slugs, `--env` pairs and volume names.
//!
//! Every type parses with [`FromStr`](std::str::FromStr), refusing with an error that says
//! what was wrong and what would be right, and prints with `Display` in a form that parses
//! back to the same value. No I/O, no clock, no async: the rules are in
//! `docs/input-rules.md`.
//!
//! Main types: [`Money`], [`Sku`], [`MemoryGib`], [`Entrypoint`], [`Check`] (with
//! [`Verdict`]), [`Slug`], [`EnvPair`], [`VolumeName`]; printing helpers
//! [`format_duration`], [`format_bytes`], [`format_bytes_short`]. And one shape that is not
//! typed but shared: [`TreeEntry`], a tree's entry, the same in div-ship's manifest and in the
//! API.
//!
//! ```
//! use div_spec::{Check, Entrypoint, Money, Outcome};
//!
//! let ceiling: Money = "$5".parse().unwrap();
//! assert_eq!(ceiling.cents(), 500);
//! assert_eq!(ceiling.to_string(), "$5.00");
//!
//! let entry = Entrypoint::parse("train.py::run").unwrap();
//! assert_eq!(entry.command(), "python -u -c 'from train import run; run()'");
//!
//! let check: Check = "metrics.accuracy>=0.8".parse().unwrap();
//! let verdict = check.evaluate(&serde_json::json!({"metrics": {"accuracy": 0.91}}));
//! assert_eq!(verdict.outcome, Outcome::Passed);
//! assert_eq!(verdict.line(), "check passed: metrics.accuracy >= 0.8 (found 0.91)");
//! ```

mod check;
mod decimal;
mod entrypoint;
mod env;
mod human;
mod memory;
mod model;
mod money;
mod nearest;
mod run_name;
mod sku;
mod slug;
mod terminal;
mod tree;
mod volume;

pub use check::{Check, CheckError, CheckOp, CheckValue, Outcome, Verdict};
pub use entrypoint::{Entrypoint, EntrypointError, EntrypointKind, shell_quote};
pub use env::{
    DEFAULT_STOP_GRACE_SECONDS, EnvError, EnvPair, MAX_ENV_NAME_BYTES, MAX_ENV_TOTAL_BYTES,
    MAX_ENV_VALUE_BYTES, MAX_STOP_GRACE_SECONDS, STOP_GRACE_ENV, check_env_name, check_env_total,
    check_env_value, is_env_key, parse_stop_grace,
};
pub use human::{MAX_RUN_SECONDS, format_bytes, format_bytes_short, format_duration};
pub use memory::{MemoryError, MemoryGib};
pub use model::{
    DigestMode, ModelDigest, ModelPin, ModelRef, ModelRefError, Sha256Hex, is_sha256_hex,
    sha256_hex,
};
pub use money::{Money, MoneyError};
pub use nearest::did_you_mean;
pub use run_name::{MAX_RUN_NAME_LEN, RunNameError, check_run_name};
pub use sku::{Sku, UnknownSku};
pub use slug::{MAX_SLUG_LEN, ProjectNameError, Slug, SlugError, check_project_name};
pub use terminal::{is_terminal_control, terminal_safe};
pub use tree::{EntryKind, TreeEntry};
pub use volume::{VolumeName, VolumeNameError, is_volume_path, volumes_named};

/// The image a run gets when it names none (`div run --image` unset). One home: div-core
/// places runs with it and div-server compares a run's image with it, so bumping it here
/// changes both.
pub const DEFAULT_IMAGE: &str = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime";
