//! The run routes (`/v1/runs…`): each reads its request, calls one operation of
//! [`crate::runs`], and answers. A run's log is [`super::logstream`]'s.

use std::sync::Arc;

use div_api::RunValidated;
use div_api::routes::{self, Found};
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::volumes::made_or_found;
use super::wire::{self, Resp, answer, blocking, header, param, read_body};
use crate::members::Actor;
use crate::runs;
use crate::server::Server;

pub(super) async fn validate(
    server: &Arc<Server>,
    actor: &Actor,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let body = read_body(req).await?;
    let actor = actor.clone();
    blocking(server, move |s| runs::validate_run(s, &actor, &body)).await?;
    let valid = RunValidated {
        valid: true,
        extra: Default::default(),
    };
    Ok(answer(&routes::VALIDATE_RUN, 200, &valid))
}

pub(super) async fn create(
    server: &Arc<Server>,
    actor: &Actor,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let key = header(&req, div_api::IDEMPOTENCY_KEY).unwrap_or_default();
    let body = read_body(req).await?;
    let (made, run) = runs::place(server, actor, key, body).await?;
    Ok(answer(&routes::CREATE_RUN, made_or_found(made), &run))
}

pub(super) async fn list(server: &Arc<Server>, q: &[(String, String)]) -> Result<Resp, HttpError> {
    let query = wire::list_query(q)?;
    let list = blocking(server, move |s| runs::list(s, &query)).await?;
    Ok(answer(&routes::LIST_RUNS, 200, &list))
}

pub(super) async fn get(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let run = found.param("run").to_owned();
    let (r, _) = blocking(server, move |s| runs::get_run(s, &run)).await?;
    Ok(answer(&routes::GET_RUN, 200, &r))
}

pub(super) async fn stop(
    server: &Arc<Server>,
    actor: &Actor,
    found: &Found<'_>,
) -> Result<Resp, HttpError> {
    let r = runs::stop_and_wait(server, actor, found.param("run").to_owned()).await?;
    Ok(answer(&routes::STOP_RUN, 200, &r))
}

pub(super) async fn result(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let run = found.param("run").to_owned();
    // The result as the run wrote it (its numbers' digits kept), in `RunResult`'s shape.
    let result = blocking(server, move |s| runs::result_exact(s, &run)).await?;
    Ok(wire::json(200, &result))
}

pub(super) async fn telemetry(
    server: &Arc<Server>,
    found: &Found<'_>,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let run = found.param("run").to_owned();
    let after: u64 = param(q, "after").and_then(|o| o.parse().ok()).unwrap_or(0);
    let t = blocking(server, move |s| runs::telemetry(s, &run, after)).await?;
    Ok(answer(&routes::TELEMETRY, 200, &t))
}
