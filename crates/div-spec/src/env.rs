//! `--env KEY=value` pairs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The longest value an environment variable (or a secret) may have, in bytes: 128 KiB, the
/// kernel's own limit for one `KEY=value` string (`MAX_ARG_STRLEN`), less room for the name.
pub const MAX_ENV_VALUE_BYTES: usize = 128 * 1024 - 256;

/// An environment variable for a run: `KEY=value`.
///
/// The key is `[A-Za-z_][A-Za-z0-9_]*`; the value is everything after the first `=`, and may
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
    #[error("`{key}` is not a variable name: letters, digits and `_`, not starting with a digit")]
    BadKey { key: String },
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

/// Whether `key` is a portable environment variable name.
pub fn is_env_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
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
        if !is_env_key(key) {
            return Err(EnvError::BadKey {
                key: key.to_owned(),
            });
        }
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
