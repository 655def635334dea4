//! `--env KEY=value` pairs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The longest value an environment variable (or a secret) may have, in bytes: 128 KiB, the
/// kernel's own limit for one `KEY=value` string (`MAX_ARG_STRLEN`), less room for the name.
pub const MAX_ENV_VALUE_BYTES: usize = 128 * 1024 - 256;

/// The longest name an environment variable (or a secret) may have, in bytes. The kernel has
/// no limit of its own short of [`MAX_ENV_VALUE_BYTES`], but no real program reads a longer
/// name, and each name is shown in listings and messages.
pub const MAX_ENV_NAME_BYTES: usize = 255;

/// The most a run's own environment may hold, in bytes: its `--env` variables and the secrets
/// together, each counted as the kernel counts it, `KEY=value` and a NUL. 1 MiB: the kernel
/// takes at most a quarter of the stack limit (2 MiB under the usual 8 MiB) for a program's
/// arguments and environment together, and the command, the image's `Env` and div's own
/// variables need the rest.
pub const MAX_ENV_TOTAL_BYTES: usize = 1024 * 1024;

/// An environment variable for a run: `KEY=value`.
///
/// The key is `[A-Za-z_][A-Za-z0-9_]*`, at most [`MAX_ENV_NAME_BYTES`] long; the value is everything after the first `=`, and may
/// be empty or hold more `=`, but holds no NUL byte and is at most [`MAX_ENV_VALUE_BYTES`]
/// long (see [`check_env_value`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EnvPair {
    /// The variable's name.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// The error returned by [`EnvPair::from_str`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// Nothing typed.
    #[error("the variable is empty; write `KEY=value`")]
    Empty,
    /// No `=`.
    #[error("`{typed}` has no `=`; write `KEY=value` (`{typed}=` for an empty value)")]
    NoEquals { typed: String },
    /// Nothing before the `=`.
    #[error("`{typed}` has no name before `=`; write `KEY=value`")]
    NoKey { typed: String },
    /// A name that is not a variable name.
    #[error(
        "`{}` is not a variable name: letters, digits and `_`, not starting with a digit",
        shown(key)
    )]
    BadKey { key: String },
    /// A name past [`MAX_ENV_NAME_BYTES`].
    #[error(
        "the variable name `{}` is {bytes} bytes; a name holds at most {max} bytes",
        shown(key)
    )]
    KeyTooLong {
        key: String,
        bytes: usize,
        max: usize,
    },
    /// A value holding a NUL byte, which no environment can carry.
    #[error(
        "the value of `{key}` holds a NUL byte (at byte {at}), which an environment variable cannot carry"
    )]
    Nul { key: String, at: usize },
    /// A value past [`MAX_ENV_VALUE_BYTES`].
    #[error(
        "the value of `{key}` is {bytes} bytes; an environment variable holds at most {max} bytes (128 KiB less 256); put larger data in a file or a volume"
    )]
    TooLong {
        key: String,
        bytes: usize,
        max: usize,
    },
    /// Variables that together are past [`MAX_ENV_TOTAL_BYTES`].
    #[error(
        "{what} hold {bytes} bytes together (`KEY=value` and a NUL each, the largest `{}`); a run's environment holds at most {max} bytes (1 MiB); put larger data in a file or a volume",
        shown(largest)
    )]
    TooBig {
        /// What the variables are: "the run's --env variables and the secrets".
        what: String,
        bytes: usize,
        max: usize,
        /// The name of the largest of them.
        largest: String,
    },
    /// A `DIVERGENT_STOP_GRACE` that is not whole seconds up to [`MAX_STOP_GRACE_SECONDS`].
    #[error(
        "{STOP_GRACE_ENV} is `{}`; it is whole seconds between SIGTERM and SIGKILL when the run is told to stop, 0 to {MAX_STOP_GRACE_SECONDS} (e.g. --env {STOP_GRACE_ENV}=30)",
        typed.escape_debug()
    )]
    BadStopGrace { typed: String },
}

/// The run's own variable for its grace: how long it has between SIGTERM and SIGKILL when it
/// is told to stop (stopped, near its ceiling or its time limit).
pub const STOP_GRACE_ENV: &str = "DIVERGENT_STOP_GRACE";
/// The grace of a run that does not set its own (and whose control plane says nothing).
pub const DEFAULT_STOP_GRACE_SECONDS: u64 = 10;
/// The longest grace a run or a control plane may set.
pub const MAX_STOP_GRACE_SECONDS: u64 = 600;

/// A `DIVERGENT_STOP_GRACE` value: whole seconds, digits only, at most
/// [`MAX_STOP_GRACE_SECONDS`].
pub fn parse_stop_grace(value: &str) -> Result<u64, EnvError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|g| *g <= MAX_STOP_GRACE_SECONDS && value.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| EnvError::BadStopGrace {
            typed: value.to_owned(),
        })
}

/// A name as a message shows it: whole when short, else its start and how long it is.
fn shown(key: &str) -> String {
    const SHOWN: usize = 40;
    if key.len() <= SHOWN {
        return key.to_owned();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &key[..end])
}

/// Whether `key` may name an environment variable (or a secret): `[A-Za-z_][A-Za-z0-9_]*`,
/// at most [`MAX_ENV_NAME_BYTES`] bytes.
pub fn check_env_name(key: &str) -> Result<(), EnvError> {
    let mut bytes = key.bytes();
    let portable = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !portable {
        return Err(EnvError::BadKey {
            key: key.to_owned(),
        });
    }
    if key.len() > MAX_ENV_NAME_BYTES {
        return Err(EnvError::KeyTooLong {
            key: key.to_owned(),
            bytes: key.len(),
            max: MAX_ENV_NAME_BYTES,
        });
    }
    Ok(())
}

/// Whether `vars` (`what` they are, for the message) fit in a run's environment together:
/// at most [`MAX_ENV_TOTAL_BYTES`], each counted as `KEY=value` and a NUL. A name given twice
/// counts once, with its last value (the one a run gets).
pub fn check_env_total<'a>(
    what: &str,
    vars: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), EnvError> {
    let mut last = std::collections::BTreeMap::new();
    for (key, value) in vars {
        last.insert(key, value);
    }
    let size = |(key, value): (&&str, &&str)| key.len().saturating_add(value.len()) + 2;
    let bytes = last.iter().map(size).fold(0usize, usize::saturating_add);
    if bytes <= MAX_ENV_TOTAL_BYTES {
        return Ok(());
    }
    // The first of the largest, in name order.
    let mut largest = ("", 0);
    for kv in &last {
        if size(kv) > largest.1 {
            largest = (kv.0, size(kv));
        }
    }
    let largest = largest.0.to_owned();
    Err(EnvError::TooBig {
        what: what.to_owned(),
        bytes,
        max: MAX_ENV_TOTAL_BYTES,
        largest,
    })
}

/// Whether `value` may be the value of the environment variable (or secret) `key`: no NUL
/// byte, and at most [`MAX_ENV_VALUE_BYTES`] bytes.
pub fn check_env_value(key: &str, value: &str) -> Result<(), EnvError> {
    if let Some(at) = value.find('\0') {
        return Err(EnvError::Nul {
            key: key.to_owned(),
            at,
        });
    }
    if value.len() > MAX_ENV_VALUE_BYTES {
        return Err(EnvError::TooLong {
            key: key.to_owned(),
            bytes: value.len(),
            max: MAX_ENV_VALUE_BYTES,
        });
    }
    Ok(())
}

/// Whether `key` is a portable environment variable name of at most [`MAX_ENV_NAME_BYTES`]
/// ([`check_env_name`]).
pub fn is_env_key(key: &str) -> bool {
    check_env_name(key).is_ok()
}

impl FromStr for EnvPair {
    type Err = EnvError;

    fn from_str(typed: &str) -> Result<EnvPair, EnvError> {
        if typed.is_empty() {
            return Err(EnvError::Empty);
        }
        let Some((key, value)) = typed.split_once('=') else {
            return Err(EnvError::NoEquals {
                typed: typed.to_owned(),
            });
        };
        if key.is_empty() {
            return Err(EnvError::NoKey {
                typed: typed.to_owned(),
            });
        }
        check_env_name(key)?;
        check_env_value(key, value)?;
        Ok(EnvPair {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }
}

impl fmt::Display for EnvPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

#[cfg(test)]
mod stop_grace_tests {
    use super::{EnvError, parse_stop_grace};

    #[test]
    fn a_stop_grace_is_whole_seconds_up_to_600() {
        assert_eq!(parse_stop_grace("0"), Ok(0));
        assert_eq!(parse_stop_grace("600"), Ok(600));
        for bad in [
            "",
            "601",
            "-1",
            "+3",
            "1.5",
            "ten",
            " 3",
            "99999999999999999999999",
        ] {
            assert!(
                matches!(parse_stop_grace(bad), Err(EnvError::BadStopGrace { .. })),
                "{bad:?}"
            );
        }
    }
}
