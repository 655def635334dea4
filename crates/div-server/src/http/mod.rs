//! The HTTP side: authentication and routing. [`route`] answers each route of div-api's table
//! in one arm that calls one handler, which lives with its subject's routes (`volumes`,
//! `runs`, `images`, `secrets`) and calls one operation of that service; `refusal` turns each
//! service's errors into the API's, `error`'s [`HttpError`]. The bodies are `wire`'s, the
//! streams `logstream`'s, `files`'s and `pull`'s, the blob upload `upload`'s, the dashboard
//! `dashboard`'s, and the listeners `listen`'s.

pub(crate) mod dashboard;
pub(crate) mod error;
pub(crate) mod files;
mod images;
pub(crate) mod listen;
mod logstream;
mod models;
mod pull;
mod refusal;
mod runs;
mod secrets;
mod upload;
mod volumes;
mod wire;

use std::convert::Infallible;
use std::sync::Arc;

use div_api::routes::{self, Route};
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;

use crate::server::Server;
use error::{ErrorCode, HttpError};
use wire::{Resp, answer, blocking, decode_segment, fail, header, query};

/// What every connection shares: the server, and what only the HTTP side needs.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) server: Arc<Server>,
    /// Uploads of one blob take turns.
    pub(crate) uploads: upload::UploadLocks,
    /// The dashboard's loopback listener and tokens, opened on demand.
    pub(crate) dashboard: dashboard::Dashboard,
}

/// Whether `given` is `token`, in a time that depends on their lengths only, never on where
/// they first differ (a byte-by-byte `==` stops there, which a caller could time).
fn same_token(given: &[u8], token: &[u8]) -> bool {
    let mut differ = given.len() ^ token.len();
    for i in 0..given.len().max(token.len()) {
        let a = given.get(i).copied().unwrap_or(0);
        let b = token.get(i).copied().unwrap_or(0);
        differ |= usize::from(std::hint::black_box(a ^ b));
    }
    differ == 0
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    token: Option<Arc<String>>,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    if let Some(token) = token {
        let ok = header(&req, "authorization")
            .as_deref()
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| same_token(t.as_bytes(), token.as_bytes()));
        if !ok {
            return Ok(fail(HttpError::new(
                ErrorCode::Unauthorized,
                "a valid bearer token is required",
            )));
        }
    }
    Ok(route(&shared, req).await.unwrap_or_else(fail))
}

/// Finds the route of div-api's table a request is, and answers it.
async fn route(shared: &Shared, req: Request<Incoming>) -> Result<Resp, HttpError> {
    let server = &shared.server;
    let path = req.uri().path().to_owned();
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(decode_segment)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    let Some(found) = Route::find(method.as_str(), &seg) else {
        return Err(HttpError::not_found(format!("no route `{method} {path}`")));
    };
    let q = query(&req);
    // Each route of the table once: one the table gains and this does not answer does not
    // compile.
    match found.route {
        Route::Health => Ok(health(server)),
        Route::Catalogue => catalogue(server).await,
        Route::ListVolumes => volumes::list(server).await,
        Route::CreateVolume => volumes::create(server, req).await,
        Route::DeleteVolume => volumes::delete(server, &found).await,
        Route::MissingBlobs => volumes::missing_blobs(server, &found, req).await,
        Route::UploadPack => volumes::upload_pack(server, &found, &q, req).await,
        Route::UploadBlob => upload::upload(server, &shared.uploads, &found, &q, req).await,
        Route::CommitTree => volumes::commit_tree(server, &found, req).await,
        Route::StageTree => volumes::stage_tree(server, &found, req).await,
        Route::CommitStage => volumes::commit_stage(server, &found).await,
        Route::TreeHeld => volumes::tree_held(server, &found, &q).await,
        Route::ListTree => volumes::list_tree(server, &found, &q).await,
        Route::ReadFile => files::respond(server, volumes::named(&found)?, &q, &req).await,
        Route::ListImages => images::list(server).await,
        Route::PruneImages => images::prune(server, req).await,
        Route::PullImage => images::pull(server, req).await,
        Route::ValidateRun => runs::validate(server, req).await,
        Route::CreateRun => runs::create(server, req).await,
        Route::ListRuns => runs::list(server, &q).await,
        Route::GetRun => runs::get(server, &found).await,
        Route::StopRun => runs::stop(server, &found).await,
        Route::Log => logstream::respond(server, found.param("run").to_owned(), &q).await,
        Route::Result => runs::result(server, &found).await,
        Route::Telemetry => runs::telemetry(server, &found, &q).await,
        Route::OpenDashboard => dashboard::open(&shared.dashboard, server).await,
        Route::ListSecrets => secrets::list(server).await,
        Route::SetSecret => secrets::set(server, &found, req).await,
        Route::DeleteSecret => secrets::delete(server, &found).await,
        Route::ListModels => models::list(server).await,
        Route::GetModel => models::get(server, &found).await,
        Route::PushModel => models::push(server, &found, req).await,
        Route::DeleteModel => models::delete(server, &found, false).await,
        Route::DeleteModelVersion => models::delete(server, &found, true).await,
        Route::ListEvaluations => models::evaluations(server, &q).await,
        Route::GetEvaluation => models::evaluation(server, &found).await,
    }
}

/// `GET /v1/health`: the server, its version, where it runs runs.
fn health(server: &Server) -> Resp {
    wire::json(
        200,
        &json!({
            "ok": true,
            "version": env!("CARGO_PKG_VERSION"),
            "executor": server.executor.describe(),
            // The inventory in effect: a client asking for another restarts the server.
            "emulated_gpus": server.inventory.emulated_gpus(),
        }),
    )
}

/// `GET /v1/catalogue`: what this machine offers, with the org's usage this month when a
/// limit is set (a client refuses a run before it uploads anything while it is reached).
async fn catalogue(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let catalogue = blocking(server, |s| {
        let mut catalogue = s.inventory.catalogue();
        if let Some(usage) = s.org_usage()? {
            catalogue.extra.insert(
                "org_usage".to_owned(),
                serde_json::to_value(&usage).unwrap_or_default(),
            );
        }
        Ok::<_, HttpError>(catalogue)
    })
    .await?;
    Ok(answer(&routes::CATALOGUE, 200, &catalogue))
}
