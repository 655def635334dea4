//! Secrets: values given to every run's environment, listed by name only.

use div_api::SecretInfo;

use crate::fault::{StateError, state_errors};
use crate::store::Store;
use div_runtime::clock;

/// The error returned by [`set`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetSecretError {
    /// Not an environment variable's name (div-spec's words).
    #[error("the secret's name is refused: {0}")]
    BadName(String),
    /// A value no process could be given (the sandbox's words).
    #[error("{0}")]
    BadValue(String),
    /// With the others, more than a run's environment holds.
    #[error("the secret `{name}` is refused: {why}; remove a secret with `div secrets rm NAME`")]
    TooMuch { name: String, why: String },
    #[error("the secret vanished")]
    Vanished,
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(SetSecretError);

/// The error returned by [`delete`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeleteSecretError {
    #[error("no secret `{0}`")]
    NoSecret(String),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(DeleteSecretError);

/// Refuses a secret name that is not an environment variable name, or is longer than
/// [`div_spec::MAX_ENV_NAME_BYTES`].
pub(crate) fn check_name(name: &str) -> Result<(), SetSecretError> {
    div_spec::check_env_name(name).map_err(|e| SetSecretError::BadName(e.to_string()))
}

/// Every secret, by name.
pub(crate) fn list(store: &Store) -> Result<Vec<SecretInfo>, StateError> {
    Ok(store.secrets()?)
}

/// Sets (or replaces) the secret `name`; what the listing now says of it. `turn` is held
/// while the secrets are checked together and written: two sets cannot each fit alone.
pub(crate) fn set(
    store: &Store,
    turn: &std::sync::Mutex<()>,
    name: &str,
    value: &str,
) -> Result<SecretInfo, SetSecretError> {
    check_name(name)?;
    // A value no process could be given is refused now, not when a run starts.
    if let Some(problem) = div_runtime::sandbox::env_value_problem("secret", name, value) {
        return Err(SetSecretError::BadValue(problem));
    }
    // Every run gets every secret: together they must fit in a run's environment.
    let _guard = turn.lock().unwrap_or_else(|e| e.into_inner());
    let others = store.secret_values()?;
    let all = others
        .iter()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain([(name, value)]);
    div_spec::check_env_total("the secrets", all).map_err(|e| SetSecretError::TooMuch {
        name: name.to_owned(),
        why: e.to_string(),
    })?;
    store.set_secret(name, value, &clock::now_rfc3339())?;
    store
        .secrets()?
        .into_iter()
        .find(|i| i.name == name)
        .ok_or(SetSecretError::Vanished)
}

/// Deletes the secret `name`.
pub(crate) fn delete(store: &Store, name: &str) -> Result<(), DeleteSecretError> {
    if store.delete_secret(name)? {
        Ok(())
    } else {
        Err(DeleteSecretError::NoSecret(name.to_owned()))
    }
}
