//! `div secrets`: set, list and remove the org's secrets. Values go one way: a secret's value
//! is sent, never read back.

use div_api::{ControlPlane, SecretInfo};

use crate::error::RunError;

/// Set a secret; every run started afterwards has it as an environment variable (an `--env`
/// of the same name wins). The name must be an environment variable's.
pub async fn secret_set(
    cp: &dyn ControlPlane,
    name: &str,
    value: &str,
) -> Result<SecretInfo, RunError> {
    check_name(name)?;
    cp.set_secret(name, value)
        .await
        .map_err(|e| RunError::api("set the secret", e))
}

/// The secrets' names and when each was last set, never their values.
pub async fn secret_list(cp: &dyn ControlPlane) -> Result<Vec<SecretInfo>, RunError> {
    cp.list_secrets()
        .await
        .map_err(|e| RunError::api("list the secrets", e))
}

/// Remove a secret.
pub async fn secret_remove(cp: &dyn ControlPlane, name: &str) -> Result<(), RunError> {
    check_name(name)?;
    cp.delete_secret(name).await.map_err(|e| {
        if e.is_not_found() {
            RunError::SecretNotFound(name.to_string())
        } else {
            RunError::api("remove the secret", e)
        }
    })
}

fn check_name(name: &str) -> Result<(), RunError> {
    if div_spec::is_env_key(name) {
        Ok(())
    } else {
        Err(RunError::SecretName(name.to_string()))
    }
}
