//! Secrets in the fake: set, listed without their values, removed.

use div_api::{ApiError, Route, SecretInfo};
use serde_json::Value;

use super::state::{FAKE_TIME, FakeControlPlane, invalid, not_found};

pub(crate) async fn set_secret(
    fake: &FakeControlPlane,
    name: &str,
    value: &str,
) -> Result<SecretInfo, ApiError> {
    fake.called(Route::SetSecret);
    // The server's rule: an environment variable name (div-spec's).
    if !div_spec::is_env_key(name) {
        return Err(invalid(
            format!("`{name}` is not an environment variable name"),
            Value::Null,
        ));
    }
    let info = SecretInfo {
        name: name.to_owned(),
        updated_at: FAKE_TIME.to_owned(),
        extra: Default::default(),
    };
    fake.state()
        .secrets
        .insert(name.to_owned(), (value.to_owned(), info.clone()));
    Ok(info)
}

pub(crate) async fn list_secrets(fake: &FakeControlPlane) -> Result<Vec<SecretInfo>, ApiError> {
    fake.called(Route::ListSecrets);
    Ok(fake
        .state()
        .secrets
        .values()
        .map(|(_, i)| i.clone())
        .collect())
}

pub(crate) async fn delete_secret(fake: &FakeControlPlane, name: &str) -> Result<(), ApiError> {
    fake.called(Route::DeleteSecret);
    fake.state()
        .secrets
        .remove(name)
        .map(drop)
        .ok_or_else(|| not_found("secret", name))
}
