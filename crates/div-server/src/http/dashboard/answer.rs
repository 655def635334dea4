//! What the dashboard answers behind its session cookie: its pages and assets, and its own
//! API (`/api/…`): the runs list and a run's page (its result, how it was placed, what it ran
//! in), its log by ranges or whole, its charts' points, and stopping a run as `div stop` does;
//! the models and a model's versions and evaluations.

use std::sync::Arc;

use bytes::Bytes;
use div_api::WhoAmI;
use div_api::routes::{dashboard, dashboard::DashboardRoute};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;

use super::{assets, replay};
use crate::http::audited::audited;
use crate::http::error::{ErrorCode, HttpError};
use crate::http::wire::{self, Resp, blocking, decode_segment, fail, header, param};
use crate::http::{auth, files};
use crate::members::{Actor, Right};
use crate::server::Server;
use crate::{models, runs};

/// Who `actor` is, as the dashboard's session route answers.
pub(super) fn who(actor: &Actor) -> WhoAmI {
    WhoAmI {
        name: actor.name.clone(),
        role: actor.role,
        extra: Default::default(),
    }
}

/// The most bytes of a log one request answers.
pub(super) const MAX_LOG_READ: u64 = 4 << 20;

/// Answers a request of `actor`'s session: a page, or a route of the dashboard's API, when
/// `actor` has the right it needs (`auth::dashboard_rule`; a page needs to read).
pub(super) async fn route(
    server: &Arc<Server>,
    actor: &Actor,
    req: Request<Incoming>,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let path = req.uri().path().to_owned();
    let segments: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(decode_segment)
        .collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    let Some(found) = DashboardRoute::find(method.as_str(), &seg) else {
        if !actor.may(Right::Read) {
            return Err(auth::forbidden(actor, Right::Read));
        }
        // The pages, which are no routes of the dashboard's API.
        return match (&method, seg.as_slice()) {
            (&Method::GET, [""]) => Ok(assets::page(assets::INDEX)),
            (&Method::GET, ["runs", _]) => Ok(assets::page(assets::RUN)),
            (&Method::GET, ["models"]) => Ok(assets::page(assets::MODELS)),
            (&Method::GET, ["models", _]) => Ok(assets::page(assets::MODEL)),
            _ => Err(HttpError::not_found(format!("no page `{method} {path}`"))),
        };
    };
    let rule = auth::dashboard_rule(found.route);
    let actor = auth::allowed(Some(actor.clone()), rule, &actor.from)?;
    // Each route of the dashboard's table once, as the API's router answers its own.
    match found.route {
        DashboardRoute::ListRuns => {
            let query = wire::list_query(q)?;
            let list = blocking(server, move |s| runs::list(s, &query)).await?;
            Ok(wire::answer(&dashboard::LIST_RUNS, 200, &list))
        }
        DashboardRoute::GetRun => {
            let run = found.param("run").to_owned();
            let detail = blocking(server, move |s| {
                let (r, _) = runs::get_run(s, &run)?;
                let result = runs::result(s, &r.id)?;
                let replay = replay::command(&r);
                let signalled = signalled_at(&s.home.run_dir(&r.id));
                let ran_in = ran_in(&s.home.run_dir(&r.id), &r.image);
                Ok::<_, runs::RunError>(json!({
                    "run": r,
                    "result": result,
                    "replay": replay,
                    "signalled_at": signalled,
                    "ran_in": ran_in,
                }))
            })
            .await?;
            Ok(wire::answer(&dashboard::GET_RUN, 200, &detail))
        }
        DashboardRoute::StopRun => {
            let r = runs::stop_and_wait(server, &actor, found.param("run").to_owned()).await?;
            let resp = wire::answer(&dashboard::STOP_RUN, 200, &r);
            Ok(audited(server, &actor, rule.audit, &found, resp).await)
        }
        DashboardRoute::Session => Ok(wire::answer(&dashboard::SESSION, 200, &who(&actor))),
        // Each listener signs in and out its own way, before this.
        DashboardRoute::SignIn | DashboardRoute::SignOut => Err(HttpError::not_found(
            "this dashboard does not sign in with a token: open the link `div dashboard` prints",
        )),
        DashboardRoute::Log => {
            let run = found.param("run").to_owned();
            let id = blocking(server, move |s| runs::get_run(s, &run).map(|(r, _)| r.id)).await?;
            let file = server.home.run_dir(&id).join("log");
            if param(q, "download").is_some() {
                return download(&file, &id).await;
            }
            let range = header(&req, "range");
            log_range(file, range).await
        }
        DashboardRoute::ListModels => {
            let list = blocking(server, |s| models::list(&s.volumes(), s.sandboxed)).await?;
            Ok(wire::answer(&dashboard::LIST_MODELS, 200, &list))
        }
        DashboardRoute::GetModel => {
            let name = found.param("name").to_owned();
            let model = blocking(server, move |s| {
                models::evaluations::model(&s.volumes(), &name, s.sandboxed)
            })
            .await?;
            Ok(wire::answer(&dashboard::GET_MODEL, 200, &model))
        }
        DashboardRoute::Charts => {
            let run = found.param("run").to_owned();
            let charts = blocking(server, move |s| charts(s, &run)).await?;
            Ok(wire::answer(&dashboard::CHARTS, 200, &charts))
        }
    }
}

/// When the run was asked to stop, in RFC 3339: the time the stop request was written into
/// its directory (the local executor's `stop` file, which its supervisor watches). `None`
/// when it never was (or its executor keeps no such file).
fn signalled_at(run_dir: &std::path::Path) -> Option<String> {
    let modified = std::fs::metadata(run_dir.join("stop"))
        .and_then(|m| m.modified())
        .ok()?;
    let ms = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    Some(div_runtime::clock::rfc3339(u64::try_from(ms).ok()?))
}

/// What the run runs in, from the image record its directory holds (written when the run
/// was placed, `image.json`): `{"image": REF, "digest": D}` for an image pulled, or
/// `{"host": true, "stands_in_for": IMAGE}` where there is none, as this machine's own system
/// stands in for the default image (`DIVERGENT_DEFAULT_IMAGE=host`); `{"problem": …}` when the
/// record cannot be read.
pub(super) fn ran_in(run_dir: &std::path::Path, image: &str) -> serde_json::Value {
    match crate::images::read_run_image(run_dir) {
        Ok(Some(i)) => json!({"image": i.reference, "digest": i.digest}),
        Ok(None) => json!({"host": true, "stands_in_for": image}),
        Err(problem) => json!({"problem": problem.to_string()}),
    }
}

/// The whole log, as a file to save.
async fn download(file: &std::path::Path, id: &str) -> Result<Resp, HttpError> {
    if !tokio::fs::try_exists(file).await.unwrap_or(false) {
        return Ok(wire::full(200, "text/plain; charset=utf-8", Bytes::new()));
    }
    let mut resp = files::file_response(file, None, None).await?;
    let h = resp.headers_mut();
    h.insert(
        "content-type",
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // The id is the server's own (`r_` and base36), never the run's name.
    if let Ok(v) = http::HeaderValue::from_str(&format!("attachment; filename=\"{id}.log\"")) {
        h.insert("content-disposition", v);
    }
    Ok(resp)
}

/// The byte range a `range: bytes=…` asks of a file of `size` bytes, at most
/// [`MAX_LOG_READ`] of it: `a-b`, `a-`, `-n` (the last n); none or another form is the
/// last [`MAX_LOG_READ`] bytes. `Err` when it starts at or past the end.
pub(super) fn wanted_range(range: Option<&str>, size: u64) -> Result<(u64, u64), ()> {
    let tail = |n: u64| (size.saturating_sub(n), size);
    let spec = range
        .and_then(|r| r.trim().strip_prefix("bytes="))
        .and_then(|r| r.split_once('-'));
    let (from, to) = match spec {
        Some(("", n)) => match n.parse::<u64>() {
            Ok(n) => tail(n.min(MAX_LOG_READ)),
            Err(_) => tail(MAX_LOG_READ),
        },
        Some((a, b)) => match (a.parse::<u64>(), b) {
            (Ok(a), "") => (a, size),
            (Ok(a), b) => match b.parse::<u64>() {
                Ok(b) if b >= a => (a, b.saturating_add(1).min(size)),
                _ => tail(MAX_LOG_READ),
            },
            _ => tail(MAX_LOG_READ),
        },
        None => tail(MAX_LOG_READ),
    };
    if from >= size && !(from == 0 && size == 0) {
        return Err(());
    }
    Ok((from, to.min(from.saturating_add(MAX_LOG_READ))))
}

/// What one read of the log found.
enum LogRead {
    /// From this byte, of a log of this size.
    Part {
        from: u64,
        size: u64,
        bytes: Vec<u8>,
    },
    /// Nothing at or past the byte asked for, in a log of this size.
    Past { size: u64 },
}

/// A part of the log: 206 with `content-range: bytes a-b/size` (the size is the log's now),
/// or 416 with `content-range: bytes */size` when nothing is past the byte asked for. A log
/// not yet written is an empty one.
async fn log_range(file: std::path::PathBuf, range: Option<String>) -> Result<Resp, HttpError> {
    let read = tokio::task::spawn_blocking(move || -> std::io::Result<LogRead> {
        use std::io::{Read, Seek};
        let mut f = match std::fs::File::open(&file) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogRead::Part {
                    from: 0,
                    size: 0,
                    bytes: Vec::new(),
                });
            }
            Err(e) => return Err(e),
        };
        let size = f.metadata()?.len();
        let Ok((from, to)) = wanted_range(range.as_deref(), size) else {
            return Ok(LogRead::Past { size });
        };
        f.seek(std::io::SeekFrom::Start(from))?;
        let mut bytes = Vec::with_capacity((to - from) as usize);
        (&mut f).take(to - from).read_to_end(&mut bytes)?;
        Ok(LogRead::Part { from, size, bytes })
    })
    .await
    .map_err(|e| HttpError::internal(format!("a task failed: {e}")))??;
    let (from, size, bytes) = match read {
        LogRead::Part { from, size, bytes } => (from, size, bytes),
        LogRead::Past { size } => {
            let mut resp = fail(HttpError::new(
                ErrorCode::RangeNotSatisfiable,
                format!("the log has {size} bytes; nothing is past the byte asked for"),
            ));
            if let Ok(v) = http::HeaderValue::from_str(&format!("bytes */{size}")) {
                resp.headers_mut().insert("content-range", v);
            }
            return Ok(resp);
        }
    };
    let last = (from + bytes.len() as u64).saturating_sub(1);
    Ok(Response::builder()
        .status(StatusCode::PARTIAL_CONTENT)
        .header("content-type", "application/octet-stream")
        .header("content-range", format!("bytes {from}-{last}/{size}"))
        .header("x-log-size", size)
        .body(Full::new(Bytes::from(bytes)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())))
}

/// The run's charts, laid out by its `telemetry.toml` (as `div telemetry` lays them out), or
/// one per series when it has none; `{"layout": "…", "problem": …, "charts": [...]}`.
fn charts(server: &Server, run: &str) -> Result<serde_json::Value, HttpError> {
    use div_api::layout::{Layout, charts};
    let (r, _) = runs::get_run(server, run)?;
    let telemetry = runs::telemetry(server, &r.id, 0)?;
    let (layout, problem, from) = match &r.telemetry_layout {
        Some(text) => match Layout::parse(text) {
            Ok(l) => (l, None, "telemetry.toml"),
            Err(e) => (
                Layout::default_for(&telemetry.points),
                Some(format!("the run's telemetry.toml could not be read: {e}")),
                "one chart per series",
            ),
        },
        None => (
            Layout::default_for(&telemetry.points),
            None,
            "one chart per series",
        ),
    };
    let charts: Vec<_> = charts(&layout, &telemetry.points)
        .into_iter()
        .map(|c| {
            json!({
                "title": c.title,
                "x": c.x,
                "series": c.series.iter().map(|s| json!({
                    "name": s.name,
                    "points": s.points.iter().map(|(x, y)| [x, y]).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({
        "layout": from,
        "problem": problem,
        "points": telemetry.points.len(),
        "bad_lines": telemetry.bad_lines.len(),
        "charts": charts,
    }))
}
