//! `--name`: what a run is called.

/// The longest run name, in bytes.
pub const MAX_RUN_NAME_LEN: usize = 63;

/// The error returned by [`check_run_name`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{typed}` is not a run name; a run name is 1 to 63 lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit, and not starting with `r_` (ids do)"
)]
pub struct RunNameError {
    /// The name as typed.
    pub typed: String,
}

/// Whether `name` may name a run: 1 to [`MAX_RUN_NAME_LEN`] bytes of `a-z`, `0-9`, `-`, `_`
/// and `.`, starting with a letter or digit, and not `r_…` (the form of a run's id, so a
/// name never reads as another run's id). The local control plane takes the same names.
pub fn check_run_name(name: &str) -> Result<(), RunNameError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_RUN_NAME_LEN
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && !name.starts_with("r_");
    if ok {
        Ok(())
    } else {
        Err(RunNameError {
            typed: name.to_owned(),
        })
    }
}
