//! Secrets: set, listed without their values, removed.

use div_api::{ControlPlane, ErrorKind};

use super::check::{CheckResult, api, ensure, expect_error};
use super::context::{ConformanceContext, key};

pub(crate) async fn secrets_without_values(
    cp: &dyn ControlPlane,
    ctx: &ConformanceContext,
) -> CheckResult {
    let name = format!("{}_SECRET", ctx.prefix.to_uppercase().replace('-', "_"));
    let value = key(ctx, "value");
    let info = cp
        .set_secret(&name, &value)
        .await
        .map_err(api("set_secret"))?;
    ensure!(info.name == name, "set `{}`, asked `{name}`", info.name);
    cp.set_secret(&name, "second value")
        .await
        .map_err(api("set_secret again"))?;
    let listed = cp.list_secrets().await.map_err(api("list_secrets"))?;
    let count = listed.iter().filter(|s| s.name == name).count();
    ensure!(count == 1, "`{name}` listed {count} times");
    let text = serde_json::to_string(&listed).map_err(|e| e.to_string())?;
    ensure!(
        !text.contains(&value) && !text.contains("second value"),
        "a listing shows a secret's value: {text}"
    );
    cp.delete_secret(&name)
        .await
        .map_err(api("delete_secret"))?;
    let listed = cp.list_secrets().await.map_err(api("list_secrets"))?;
    ensure!(
        !listed.iter().any(|s| s.name == name),
        "`{name}` listed after delete"
    );
    expect_error(
        "delete a deleted secret",
        cp.delete_secret(&name).await,
        ErrorKind::NotFound,
        Some("not_found"),
    )?;
    Ok(())
}
