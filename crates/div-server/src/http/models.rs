//! The model routes (`/v1/models…`) and the evaluations' (`/v1/evaluations…`): each reads its
//! request, calls one operation of [`crate::models`], and answers.

use std::sync::Arc;

use div_api::routes::{self, Found};
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::volumes::made_or_found;
use super::wire::{Resp, answer, blocking, empty, param, request};
use crate::members::Actor;
use crate::models::{self, evaluations};
use crate::server::Server;

pub(super) async fn list(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let list = blocking(server, |s| models::list(&s.volumes(), s.sandboxed)).await?;
    Ok(answer(&routes::LIST_MODELS, 200, &list))
}

pub(super) async fn get(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let model = blocking(server, move |s| {
        evaluations::model(&s.volumes(), &name, s.sandboxed)
    })
    .await?;
    Ok(answer(&routes::GET_MODEL, 200, &model))
}

pub(super) async fn push(
    server: &Arc<Server>,
    actor: &Actor,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let body = request(&routes::PUSH_MODEL, req).await?;
    let by = Some(actor.name.clone());
    let (made, version) = blocking(server, move |s| {
        models::push(&s.volumes(), s.sandboxed, &name, &body, by)
    })
    .await?;
    Ok(answer(&routes::PUSH_MODEL, made_or_found(made), &version))
}

pub(super) async fn delete(
    server: &Arc<Server>,
    found: &Found<'_>,
    version: bool,
) -> Result<Resp, HttpError> {
    let name = found.param("name").to_owned();
    let version = if version {
        let typed = found.param("version");
        Some(
            typed
                .strip_prefix('v')
                .unwrap_or(typed)
                .parse::<u32>()
                .map_err(|_| {
                    HttpError::malformed(format!("`{typed}` is not a version: write `v3` or `3`"))
                })?,
        )
    } else {
        None
    };
    blocking(server, move |s| {
        let going = s.going_runs().map_err(models::RemoveModelError::from)?;
        models::remove(&s.volumes(), &name, version, &going)
    })
    .await?;
    Ok(empty(204))
}

pub(super) async fn evaluations(
    server: &Arc<Server>,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let model = param(q, "model").filter(|m| !m.is_empty());
    let limit = match param(q, "limit").filter(|l| !l.is_empty()) {
        Some(l) => Some(
            l.parse::<u32>()
                .map_err(|_| HttpError::malformed(format!("`{l}` is not a limit")))?,
        ),
        None => None,
    };
    let list = blocking(server, move |s| {
        evaluations::list(&s.volumes(), model.as_deref(), limit)
    })
    .await?;
    Ok(answer(&routes::LIST_EVALUATIONS, 200, &list))
}

pub(super) async fn evaluation(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let id = found.param("id").to_owned();
    let evaluation = blocking(server, move |s| evaluations::get(&s.volumes(), &id)).await?;
    Ok(answer(&routes::GET_EVALUATION, 200, &evaluation))
}
