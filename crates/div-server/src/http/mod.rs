//! The HTTP side: authentication and routing. [`route`] finds each request's route of
//! div-api's table, lets it through when its caller has the right it needs (`auth`: one
//! table from route to right, and the members' tokens), and answers it in one arm that calls
//! one handler, which lives with its subject's routes (`volumes`, `runs`, `images`,
//! `secrets`, `members`) and calls one operation of that service; a change is then appended
//! to the audit log. `refusal` turns each service's errors into the API's, `error`'s
//! [`HttpError`]. The bodies are `wire`'s, the streams `logstream`'s, `files`'s and `pull`'s,
//! the blob upload `upload`'s, the dashboards `dashboard`'s, the listeners `listen`'s (TLS
//! `tls`'s), and the slowing of bad tokens `slowdown`'s.

pub(crate) mod audited;
pub(crate) mod auth;
pub(crate) mod dashboard;
pub(crate) mod error;
pub(crate) mod files;
mod images;
pub(crate) mod listen;
mod logstream;
mod members;
mod models;
mod pull;
mod refusal;
mod runs;
mod secrets;
pub(crate) mod slowdown;
pub(crate) mod tls;
mod upload;
mod volumes;
mod wire;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use div_api::routes::{self, Found, Route};
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;

use crate::members::Actor;
use crate::server::Server;
use audited::audited;
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
    /// Each address's bad tokens, on the team's listener.
    pub(crate) slowdown: slowdown::Slowdown,
    /// The team's dashboard sessions.
    pub(crate) sessions: dashboard::team::Sessions,
}

/// Who a connection's requests come from.
#[derive(Debug, Clone)]
pub(crate) enum Access {
    /// The owner's Unix socket: the owner, an admin.
    Owner,
    /// The loopback listener of `TcpOptions`, whose one token is the owner's.
    Shared {
        token: Arc<String>,
        peer: SocketAddr,
    },
    /// The team's listener: each request is the member its token is (or its dashboard's
    /// session); `tls` when it serves TLS.
    Team { peer: SocketAddr, tls: bool },
}

/// Whether `given` is `token`, in a time that depends on their lengths only, never on where
/// they first differ (a byte-by-byte `==` stops there, which a caller could time).
fn same_token(given: &[u8], token: &[u8]) -> bool {
    crate::members::token::constant_time_eq(given, token)
}

pub(crate) async fn handle(
    shared: Arc<Shared>,
    access: Access,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    let actor = match access {
        Access::Owner => Some(Actor::owner("unix socket")),
        Access::Shared { token, peer } => {
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
            Some(Actor::owner(peer.ip().to_string()))
        }
        Access::Team { peer, tls } => {
            // Past `/v1/` is the dashboard, which signs in once and keeps a session.
            if !req.uri().path().starts_with("/v1/") {
                let team = dashboard::team::Listener {
                    server: &shared.server,
                    slowdown: &shared.slowdown,
                    sessions: &shared.sessions,
                    peer,
                    tls,
                };
                return Ok(team.serve(req).await);
            }
            match auth::authenticate(&shared.server, &shared.slowdown, &req, peer.ip()).await {
                Ok(actor) => actor,
                Err(e) => return Ok(fail(e)),
            }
        }
    };
    Ok(route(&shared, actor, req).await.unwrap_or_else(fail))
}

/// Finds the route of div-api's table a request is, lets it through when the caller has the
/// right it needs (`auth::rule`), answers it, and appends a change to the audit log.
async fn route(
    shared: &Shared,
    actor: Option<Actor>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
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
    let rule = auth::rule(found.route);
    let from = actor.as_ref().map(|a| a.from.clone()).unwrap_or_default();
    let actor = auth::allowed(actor, rule, &from)?;
    let resp = answer_route(shared, &actor, &found, req).await?;
    Ok(audited(&shared.server, &actor, rule.audit, &found, resp).await)
}

/// Answers one route of the table: each one arm calling one handler. A route the table gains
/// and this does not answer does not compile.
async fn answer_route(
    shared: &Shared,
    actor: &Actor,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let server = &shared.server;
    let q = query(&req);
    let found = found.clone();
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
        Route::ValidateRun => runs::validate(server, actor, req).await,
        Route::CreateRun => runs::create(server, actor, req).await,
        Route::ListRuns => runs::list(server, &q).await,
        Route::GetRun => runs::get(server, &found).await,
        Route::StopRun => runs::stop(server, actor, &found).await,
        Route::Log => logstream::respond(server, found.param("run").to_owned(), &q).await,
        Route::Result => runs::result(server, &found).await,
        Route::Telemetry => runs::telemetry(server, &found, &q).await,
        Route::OpenDashboard => dashboard::open(&shared.dashboard, server).await,
        Route::ListSecrets => secrets::list(server).await,
        Route::SetSecret => secrets::set(server, &found, req).await,
        Route::DeleteSecret => secrets::delete(server, &found).await,
        Route::ListModels => models::list(server).await,
        Route::GetModel => models::get(server, &found).await,
        Route::PushModel => models::push(server, actor, &found, req).await,
        Route::DeleteModel => models::delete(server, &found, false).await,
        Route::DeleteModelVersion => models::delete(server, &found, true).await,
        Route::ListEvaluations => models::evaluations(server, &q).await,
        Route::GetEvaluation => models::evaluation(server, &found).await,
        Route::WhoAmI => Ok(members::whoami(actor)),
        Route::ListMembers => members::list(server).await,
        Route::CreateMember => members::create(server, actor, req).await,
        Route::RevokeMember => members::revoke(server, &found).await,
        Route::SetMemberLimit => members::set_limit(server, &found, req).await,
        Route::SetMemberSlurmAccount => members::set_slurm_account(server, &found, req).await,
        Route::SetOrgLimit => members::set_org_limit(server, req).await,
        Route::Audit => members::audit(server, &q).await,
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
