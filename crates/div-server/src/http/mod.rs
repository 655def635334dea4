//! The HTTP side: authentication and routing. Each route calls one function that lives
//! with its subject ([`crate::runs`], [`crate::volumes`], [`crate::secrets`]); the bodies
//! are [`wire`]'s, the streams [`logstream`]'s and [`files`]'s, the blob upload
//! [`upload`]'s, and the listeners [`listen`]'s.

pub(crate) mod dashboard;
pub(crate) mod error;
mod files;
pub(crate) mod listen;
mod logstream;
mod pull;
mod refusal;
mod upload;
mod wire;

use std::convert::Infallible;
use std::sync::Arc;

use div_api::routes::{self, Route};
use div_api::{ListRuns, RunStatus, RunValidated, SecretList, VolumeEntryList, VolumeList};
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;

use crate::server::Server;
use crate::{runs, secrets, volumes};
use error::{ErrorCode, HttpError};
use wire::blocking;
use wire::{
    Resp, answer, decode_segment, empty, fail, header, param, query, read_body, read_json, request,
};

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
        Route::Health => Ok(wire::json(
            200,
            &json!({
                "ok": true,
                "version": env!("CARGO_PKG_VERSION"),
                "executor": server.executor.describe(),
                // The inventory in effect: a client asking for another restarts the server.
                "emulated_gpus": server.inventory.emulated_gpus(),
            }),
        )),
        Route::Catalogue => {
            // With the org's usage this month, when a limit is set: a client refuses a run
            // before it uploads anything while the limit is reached.
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
        Route::ListVolumes => {
            let volumes = blocking(server, |s| volumes::list_volumes(&s.volumes())).await?;
            Ok(answer(&routes::LIST_VOLUMES, 200, &VolumeList { volumes }))
        }
        Route::CreateVolume => {
            let body = request(&routes::CREATE_VOLUME, req).await?;
            let (made, v) = blocking(server, move |s| {
                volumes::create_volume(&s.volumes(), &body.name)
            })
            .await?;
            Ok(answer(&routes::CREATE_VOLUME, made_or_found(made), &v))
        }
        Route::DeleteVolume => {
            let name = named_volume(found.param("name"))?;
            blocking(server, move |s| volumes::delete_volume(&s.volumes(), &name)).await?;
            Ok(empty(204))
        }
        Route::MissingBlobs => {
            let name = named_volume(found.param("name"))?;
            let body = request(&routes::MISSING_BLOBS, req).await?;
            let m = blocking(server, move |s| {
                volumes::missing_blobs(&s.volumes(), &name, &body.hashes)
            })
            .await?;
            Ok(answer(&routes::MISSING_BLOBS, 200, &m))
        }
        Route::UploadPack => {
            let name = named_volume(found.param("name"))?;
            let body = read_body(req).await?;
            let stage = param(&q, "stage");
            let answer = blocking(server, move |s| {
                volumes::store_pack(&s.volumes(), &name, &body, stage.as_deref())
            })
            .await?;
            Ok(wire::json(200, &answer))
        }
        Route::UploadBlob => {
            let (name, hash) = (
                named_volume(found.param("name"))?,
                found.param("hash").to_owned(),
            );
            upload::upload(Arc::clone(server), &shared.uploads, name, hash, &q, req).await
        }
        Route::CommitTree => {
            let name = named_volume(found.param("name"))?;
            let body = request(&routes::COMMIT_TREE, req).await?;
            let volume = name.clone();
            let (made, t) = blocking(server, move |s| {
                volumes::commit_tree(&s.volumes(), &name, &body)
            })
            .await?;
            // A new code snapshot: the volume's old ones are let go by the retention rule,
            // after the answer (removing a large tree takes a while).
            if made && t.path.starts_with(volumes::retention::SNAPSHOTS) {
                crate::server::spawn_work(server, move |server| {
                    if let Err(e) = volumes::retention::prune(&server.volumes(), &volume) {
                        tracing::warn!(volume, "could not apply code snapshots' retention: {e:?}");
                    }
                });
            }
            Ok(answer(&routes::COMMIT_TREE, made_or_found(made), &t))
        }
        Route::StageTree => {
            let name = named_volume(found.param("name"))?;
            let body = request(&routes::STAGE_TREE, req).await?;
            let staged = blocking(server, move |s| {
                volumes::stage_tree(&s.volumes(), &name, &body)
            })
            .await?;
            Ok(answer(&routes::STAGE_TREE, 201, &staged))
        }
        Route::CommitStage => {
            let (name, stage) = (
                named_volume(found.param("name"))?,
                found.param("stage").to_owned(),
            );
            let volume = name.clone();
            let (made, t, homes) = blocking(server, move |s| {
                volumes::commit_stage(&s.volumes(), &name, &stage)
            })
            .await?;
            // After the answer: the blobs written into the tree are recorded (where they live
            // now), then the retention rule is applied, as after any new snapshot.
            if made {
                let (path, digest) = (t.path.clone(), t.digest.clone().unwrap_or_default());
                crate::server::spawn_work(server, move |server| {
                    let vols = server.volumes();
                    if let Err(e) =
                        volumes::stage::record_homes(&vols, &volume, &path, &digest, &homes)
                    {
                        tracing::warn!(volume, "could not record a staged tree's blobs: {e:?}");
                    }
                    if path.starts_with(volumes::retention::SNAPSHOTS)
                        && let Err(e) = volumes::retention::prune(&vols, &volume)
                    {
                        tracing::warn!(volume, "could not apply code snapshots' retention: {e:?}");
                    }
                });
            }
            Ok(answer(&routes::COMMIT_STAGE, made_or_found(made), &t))
        }
        Route::TreeHeld => {
            let name = named_volume(found.param("name"))?;
            let p = param(&q, "path").unwrap_or_default();
            let d = param(&q, "digest").unwrap_or_default();
            let t = blocking(server, move |s| {
                volumes::tree_held(&s.volumes(), &name, &p, &d)
            })
            .await?;
            Ok(wire::json(200, &t))
        }
        Route::ListTree => {
            let name = named_volume(found.param("name"))?;
            let p = param(&q, "path").unwrap_or_default();
            let entries =
                blocking(server, move |s| volumes::list_tree(&s.volumes(), &name, &p)).await?;
            Ok(answer(
                &routes::LIST_TREE,
                200,
                &VolumeEntryList { entries },
            ))
        }
        Route::ReadFile => {
            files::respond(server, named_volume(found.param("name"))?, &q, &req).await
        }
        Route::ListImages => {
            let cache = blocking(server, |s| s.images.listing()).await?;
            Ok(answer(&routes::LIST_IMAGES, 200, &cache))
        }
        Route::PruneImages => {
            // No field yet; the body is read so that one that is not JSON is refused.
            let _prune = request(&routes::PRUNE_IMAGES, req).await?;
            let pruned = server.images.prune_unused(server.home.runs()).await?;
            Ok(answer(&routes::PRUNE_IMAGES, 200, &pruned))
        }
        Route::PullImage => {
            // Read more leniently than the table's `PullImage`: a body without `image` pulls
            // what a run naming none would get, as it always has.
            #[derive(serde::Deserialize)]
            struct Pull {
                image: Option<String>,
                #[serde(default)]
                pull: Option<div_api::PullPolicy>,
            }
            let body: Pull = read_json(req).await?;
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let handle = tokio::runtime::Handle::current();
            let server = Arc::clone(server);
            // On a blocking thread, as for `POST /v1/runs` (the pull's future is not `Send`).
            tokio::task::spawn_blocking(move || {
                handle.block_on(pull::pull_stream(&server.images, body.image, body.pull, tx));
            });
            Ok(wire::stream("application/x-ndjson", rx))
        }
        Route::ValidateRun => {
            let body = read_body(req).await?;
            blocking(server, move |s| runs::validate_run(s, &body)).await?;
            let valid = RunValidated {
                valid: true,
                extra: Default::default(),
            };
            Ok(answer(&routes::VALIDATE_RUN, 200, &valid))
        }
        Route::CreateRun => {
            let key = header(&req, div_api::IDEMPOTENCY_KEY).unwrap_or_default();
            let body = read_body(req).await?;
            // The image is pulled (or found in the cache) before the run exists: one that
            // cannot be used is refused with the registry's answer, and nothing is created.
            let (k, b) = (key.clone(), body.clone());
            let (image, pull) = blocking(server, move |s| runs::precheck(s, &k, &b)).await?;
            // On a blocking thread: the pull's future is not `Send` in the way hyper's
            // connection task needs (a higher-ranked lifetime inside div-image's streams).
            let handle = tokio::runtime::Handle::current();
            let image = blocking(server, move |s| {
                handle.block_on(
                    s.images
                        .resolve(image.as_deref(), pull, &div_image::NoProgress),
                )
            })
            .await?;
            let (made, run) =
                blocking(server, move |s| runs::create_run(s, &key, &body, image)).await?;
            // Start it now rather than at the next tick.
            server.kick.notify_one();
            Ok(answer(&routes::CREATE_RUN, made_or_found(made), &run))
        }
        Route::ListRuns => {
            let query = list_query(&q)?;
            let list = blocking(server, move |s| runs::list(s, &query)).await?;
            Ok(answer(&routes::LIST_RUNS, 200, &list))
        }
        Route::GetRun => {
            let run = found.param("run").to_owned();
            let (r, _) = blocking(server, move |s| runs::get_run(s, &run)).await?;
            Ok(answer(&routes::GET_RUN, 200, &r))
        }
        Route::StopRun => {
            let r = runs::stop_and_wait(server, found.param("run").to_owned()).await?;
            Ok(answer(&routes::STOP_RUN, 200, &r))
        }
        Route::Log => logstream::respond(server, found.param("run").to_owned(), &q).await,
        Route::Result => {
            let run = found.param("run").to_owned();
            // The result as the run wrote it (its numbers' digits kept), in `RunResult`'s shape.
            let result = blocking(server, move |s| runs::result_exact(s, &run)).await?;
            Ok(wire::json(200, &result))
        }
        Route::Telemetry => {
            let run = found.param("run").to_owned();
            let after: u64 = param(&q, "after").and_then(|o| o.parse().ok()).unwrap_or(0);
            let t = blocking(server, move |s| runs::telemetry(s, &run, after)).await?;
            Ok(answer(&routes::TELEMETRY, 200, &t))
        }
        Route::OpenDashboard => dashboard::open(&shared.dashboard, server).await,
        Route::ListSecrets => {
            let secrets = blocking(server, |s| secrets::list(&s.store)).await?;
            Ok(answer(&routes::LIST_SECRETS, 200, &SecretList { secrets }))
        }
        Route::SetSecret => {
            let name = found.param("name").to_owned();
            secrets::check_name(&name)?;
            let body = request(&routes::SET_SECRET, req).await?;
            let info = blocking(server, move |s| {
                secrets::set(&s.store, s.status_lock(), &name, &body.value)
            })
            .await?;
            Ok(answer(&routes::SET_SECRET, 200, &info))
        }
        Route::DeleteSecret => {
            let name = found.param("name").to_owned();
            blocking(server, move |s| secrets::delete(&s.store, &name)).await?;
            Ok(empty(204))
        }
    }
}

/// 201 for something made now, 200 for one found made.
fn made_or_found(made: bool) -> u16 {
    if made { 201 } else { 200 }
}

/// The volume a `/v1/volumes/{name}…` route names, held to the rule for volume names (422
/// with the rule otherwise) before anything is looked up by it.
fn named_volume(name: &str) -> Result<String, HttpError> {
    volumes::check_name(name)?;
    Ok(name.to_owned())
}

/// `GET /v1/runs`'s query: `project`, `status`, `limit`, `cursor` (empty ones are absent).
fn list_query(q: &[(String, String)]) -> Result<ListRuns, HttpError> {
    let given = |key| param(q, key).filter(|v| !v.is_empty());
    Ok(ListRuns {
        project: given("project"),
        status: match given("status") {
            Some(s) => Some(s.parse::<RunStatus>().map_err(HttpError::malformed)?),
            None => None,
        },
        limit: match given("limit") {
            Some(l) => Some(
                l.parse()
                    .map_err(|_| HttpError::malformed(format!("`{l}` is not a limit")))?,
            ),
            None => None,
        },
        cursor: given("cursor"),
    })
}
