//! `--env KEY=value` pairs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An environment variable for a run: `KEY=value`.
///
/// The key is `[A-Za-z_][A-Za-z0-9_]*`; the value is everything after the first `=`, and may
/// be empty or hold more `=`.
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
