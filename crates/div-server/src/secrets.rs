//! Secrets: values given to every run's environment, listed by name only.

use div_api::SecretInfo;

use crate::error::HttpError;
use crate::server::Server;
use div_runtime::clock;

/// Refuses a secret name that is not an environment variable name, or is longer than
/// [`div_spec::MAX_ENV_NAME_BYTES`].
pub(crate) fn check_name(name: &str) -> Result<(), HttpError> {
    div_spec::check_env_name(name)
        .map_err(|e| HttpError::invalid(format!("the secret's name is refused: {e}")))
}

/// Every secret, by name.
pub(crate) fn list(server: &Server) -> Result<Vec<SecretInfo>, HttpError> {
    Ok(server.store.secrets()?)
}

/// Sets (or replaces) the secret `name`; what the listing now says of it.
pub(crate) fn set(server: &Server, name: &str, value: &str) -> Result<SecretInfo, HttpError> {
    check_name(name)?;
    // A value no process could be given is refused now, not when a run starts.
    if let Some(problem) = div_runtime::sandbox::env_value_problem("secret", name, value) {
        return Err(HttpError::invalid(problem));
    }
    // Every run gets every secret: together they must fit in a run's environment. Checked and
    // written under the server's lock, so that two sets cannot each fit alone.
    let _guard = server.lock();
    let others = server.store.secret_values()?;
    let all = others
        .iter()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain([(name, value)]);
    div_spec::check_env_total("the secrets", all).map_err(|e| {
        HttpError::invalid(format!(
            "the secret `{name}` is refused: {e}; remove a secret with `div secrets rm NAME`"
        ))
    })?;
    server
        .store
        .set_secret(name, value, &clock::now_rfc3339())?;
    server
        .store
        .secrets()?
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| HttpError::internal("the secret vanished"))
}

/// Deletes the secret `name`.
pub(crate) fn delete(server: &Server, name: &str) -> Result<(), HttpError> {
    if server.store.delete_secret(name)? {
        Ok(())
    } else {
        Err(HttpError::not_found(format!("no secret `{name}`")))
    }
}
