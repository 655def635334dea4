//! The secret routes (`/v1/secrets…`): names listed, a value set, one deleted; a value is
//! never answered.

use std::sync::Arc;

use div_api::SecretList;
use div_api::routes::{self, Found};
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::wire::{Resp, answer, blocking, empty, request};
use crate::secrets;
use crate::server::Server;

pub(super) async fn list(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let secrets = blocking(server, |s| secrets::list(&s.store)).await?;
    Ok(answer(&routes::LIST_SECRETS, 200, &SecretList { secrets }))
}

pub(super) async fn set(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    secrets::check_name(&name)?;
    let body = request(&routes::SET_SECRET, req).await?;
    let info = blocking(server, move |s| {
        secrets::set(&s.store, s.status_lock(), &name, &body.value)
    })
    .await?;
    Ok(answer(&routes::SET_SECRET, 200, &info))
}

pub(super) async fn delete(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    blocking(server, move |s| secrets::delete(&s.store, &name)).await?;
    Ok(empty(204))
}
