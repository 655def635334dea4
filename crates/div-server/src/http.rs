//! The HTTP side: listeners, routing, request and response bodies, the log stream.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use div_api::{
    CommitTree, CreateVolume, ListRuns, MissingBlobsRequest, RunList, RunResult, RunStatus,
    SetSecret, Telemetry,
};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::inventory::Inventory;
use crate::runs::{self, Failure, State};
use crate::supervisor::{KeptResult, KeptTelemetry};
use crate::{ServerError, ServerOptions, sandbox, volumes};

type Resp = Response<BoxBody<Bytes, Infallible>>;

/// A response body fed by a channel, for streams (logs, files).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Resp {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn json_resp(status: u16, value: &impl Serialize) -> Resp {
    match serde_json::to_vec(value) {
        Ok(body) => full(status, "application/json", body),
        Err(e) => fail(Failure::new(500, "internal", e.to_string())),
    }
}

fn empty(status: u16) -> Resp {
    full(status, "application/json", Bytes::new())
}

fn fail(f: Failure) -> Resp {
    // `details` is an object when there is one, and absent otherwise (the contract has no
    // `null` for it).
    let mut error = json!({"code": f.code, "message": f.message});
    if !f.details.is_null() {
        error["details"] = f.details;
    }
    full(
        f.status,
        "application/json",
        serde_json::to_vec(&json!({ "error": error })).unwrap_or_default(),
    )
}

fn stream(content_type: &str, rx: mpsc::Receiver<Bytes>) -> Resp {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .body(ChannelBody(rx).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// Runs blocking work (SQLite, files) off the async threads.
async fn blocking<T: Send + 'static>(
    state: &Arc<State>,
    f: impl FnOnce(&State) -> Result<T, Failure> + Send + 'static,
) -> Result<T, Failure> {
    let state = Arc::clone(state);
    tokio::task::spawn_blocking(move || f(&state))
        .await
        .map_err(|e| Failure::new(500, "internal", format!("a task failed: {e}")))?
}

fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn param(q: &[(String, String)], key: &str) -> Option<String> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// Percent-decoding (and `+` as space) of a query or path part.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The most a JSON request body may hold: a manifest of a million paths fits.
const MAX_JSON_BODY: usize = 64 << 20;

async fn read_body(req: Request<Incoming>) -> Result<Bytes, Failure> {
    let mut body = req.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Failure::new(
                400,
                "invalid",
                format!("the request body could not be read: {e}"),
            )
        })?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_JSON_BODY {
                return Err(Failure::new(
                    413,
                    "invalid",
                    format!("the request body is larger than {MAX_JSON_BODY} bytes"),
                ));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(out))
}

async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Failure> {
    let body = read_body(req).await?;
    serde_json::from_slice(&body).map_err(|e| {
        Failure::new(
            400,
            "invalid",
            format!("the request is not valid JSON: {e}"),
        )
    })
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

async fn handle(
    state: Arc<State>,
    token: Option<Arc<String>>,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    if let Some(token) = token {
        let ok = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| same_token(t.as_bytes(), token.as_bytes()));
        if !ok {
            return Ok(fail(Failure::new(
                401,
                "unauthorized",
                "a valid bearer token is required",
            )));
        }
    }
    Ok(route(state, req).await.unwrap_or_else(fail))
}

async fn route(state: Arc<State>, req: Request<Incoming>) -> Result<Resp, Failure> {
    let path = req.uri().path().to_owned();
    let segments: Vec<String> = path.trim_matches('/').split('/').map(decode).collect();
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = req.method().clone();
    let q = query(&req);
    match (&method, seg.as_slice()) {
        (&Method::GET, ["v1", "health"]) => Ok(json_resp(
            200,
            &json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}),
        )),
        (&Method::GET, ["v1", "catalogue"]) => Ok(json_resp(200, &state.inventory.catalogue())),
        (&Method::GET, ["v1", "volumes"]) => {
            let list = blocking(&state, volumes::list_volumes).await?;
            Ok(json_resp(200, &json!({ "volumes": list })))
        }
        (&Method::POST, ["v1", "volumes"]) => {
            let body: CreateVolume = read_json(req).await?;
            let (status, v) =
                blocking(&state, move |s| volumes::create_volume(s, &body.name)).await?;
            Ok(json_resp(status, &v))
        }
        (&Method::DELETE, ["v1", "volumes", name]) => {
            let name = name.to_string();
            blocking(&state, move |s| volumes::delete_volume(s, &name)).await?;
            Ok(empty(204))
        }
        (&Method::POST, ["v1", "volumes", name, "blobs", "missing"]) => {
            let name = name.to_string();
            let body: MissingBlobsRequest = read_json(req).await?;
            let m = blocking(&state, move |s| {
                volumes::missing_blobs(s, &name, &body.hashes)
            })
            .await?;
            Ok(json_resp(200, &m))
        }
        (&Method::PUT, ["v1", "volumes", name, "blobs", hash]) => {
            upload(state, name.to_string(), hash.to_string(), &q, req).await
        }
        (&Method::POST, ["v1", "volumes", name, "trees"]) => {
            let name = name.to_string();
            let body: CommitTree = read_json(req).await?;
            let (status, t) =
                blocking(&state, move |s| volumes::commit_tree(s, &name, &body)).await?;
            Ok(json_resp(status, &t))
        }
        (&Method::GET, ["v1", "volumes", name, "tree"]) => {
            let name = name.to_string();
            let p = param(&q, "path").unwrap_or_default();
            let entries = blocking(&state, move |s| volumes::list_tree(s, &name, &p)).await?;
            Ok(json_resp(200, &json!({ "entries": entries })))
        }
        (&Method::GET, ["v1", "volumes", name, "file"]) => {
            let name = name.to_string();
            let p = param(&q, "path").unwrap_or_default();
            let file = blocking(&state, move |s| volumes::file_path(s, &name, &p)).await?;
            let range = req
                .headers()
                .get("range")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let if_range = req
                .headers()
                .get("if-range")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            file_response(&file, range.as_deref(), if_range.as_deref()).await
        }
        (&Method::POST, ["v1", "runs"]) => {
            let key = req
                .headers()
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = read_body(req).await?;
            let (status, run) = blocking(&state, move |s| runs::create_run(s, &key, &body)).await?;
            // Start it now rather than at the next tick.
            state.kick.notify_one();
            Ok(json_resp(status, &run))
        }
        (&Method::GET, ["v1", "runs"]) => {
            let query = ListRuns {
                project: param(&q, "project").filter(|p| !p.is_empty()),
                status: match param(&q, "status").filter(|s| !s.is_empty()) {
                    Some(s) => Some(
                        s.parse::<RunStatus>()
                            .map_err(|e| Failure::new(400, "invalid", e))?,
                    ),
                    None => None,
                },
                limit: match param(&q, "limit").filter(|s| !s.is_empty()) {
                    Some(l) => Some(l.parse().map_err(|_| {
                        Failure::new(400, "invalid", format!("`{l}` is not a limit"))
                    })?),
                    None => None,
                },
                cursor: param(&q, "cursor").filter(|s| !s.is_empty()),
            };
            let cursor =
                match &query.cursor {
                    Some(c) => Some(c.parse::<i64>().map_err(|_| {
                        Failure::new(400, "invalid", format!("`{c}` is not a cursor"))
                    })?),
                    None => None,
                };
            let list = blocking(&state, move |s| {
                let limit = query.limit.unwrap_or(50).clamp(1, 1000);
                let (runs, next) =
                    s.store
                        .list_runs(query.project.as_deref(), query.status, limit, cursor)?;
                let runs = runs
                    .into_iter()
                    .map(|r| {
                        s.store
                            .get_run(&r.id)
                            .ok()
                            .flatten()
                            .map_or(r, |rec| runs::view(s, &rec))
                    })
                    .collect();
                Ok(RunList {
                    runs,
                    next_cursor: next.map(|n| n.to_string()),
                    extra: Default::default(),
                })
            })
            .await?;
            Ok(json_resp(200, &list))
        }
        (&Method::GET, ["v1", "runs", run]) => {
            let run = run.to_string();
            let (r, _) = blocking(&state, move |s| runs::get_run(s, &run)).await?;
            Ok(json_resp(200, &r))
        }
        (&Method::POST, ["v1", "runs", run, "stop"]) => {
            let run = run.to_string();
            let r2 = run.clone();
            let was_running = blocking(&state, move |s| runs::request_stop(s, &r2)).await?;
            if was_running {
                // Wait (bounded) for the supervisor to end it, so the answer is the ended run.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
                while tokio::time::Instant::now() < deadline {
                    let _ = blocking(&state, |s| runs::tick(s).map_err(Failure::from)).await;
                    let r3 = run.clone();
                    let (r, _) = blocking(&state, move |s| runs::get_run(s, &r3)).await?;
                    if r.status.is_terminal() {
                        return Ok(json_resp(200, &r));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            let (r, _) = blocking(&state, move |s| runs::get_run(s, &run)).await?;
            Ok(json_resp(200, &r))
        }
        (&Method::GET, ["v1", "runs", run, "log"]) => {
            let run = run.to_string();
            let offset: u64 = param(&q, "offset")
                .and_then(|o| o.parse().ok())
                .unwrap_or(0);
            let follow = param(&q, "follow").is_some_and(|f| f == "true" || f == "1");
            let r2 = run.clone();
            let (r, _) = blocking(&state, move |s| runs::get_run(s, &r2)).await?;
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(log_stream(Arc::clone(&state), r.id, offset, follow, tx));
            Ok(stream(div_api::logframe::MEDIA_TYPE, rx))
        }
        (&Method::GET, ["v1", "runs", run, "result"]) => {
            let run = run.to_string();
            let result = blocking(&state, move |s| {
                let (r, _) = runs::get_run(s, &run)?;
                let kept: Option<KeptResult> =
                    std::fs::read(s.run_dir(&r.id).join("result.kept.json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok());
                let (result, problem) = match kept {
                    Some(k) => (k.result, k.problem),
                    None if r.status.is_terminal() => {
                        (None, Some("the run wrote no result".to_owned()))
                    }
                    None => (None, Some("the run has not ended yet".to_owned())),
                };
                Ok(RunResult {
                    run: r.id,
                    result,
                    problem,
                    verdicts: r.verdicts,
                    extra: Default::default(),
                })
            })
            .await?;
            Ok(json_resp(200, &result))
        }
        (&Method::GET, ["v1", "runs", run, "telemetry"]) => {
            let run = run.to_string();
            let after: u64 = param(&q, "after").and_then(|o| o.parse().ok()).unwrap_or(0);
            let t = blocking(&state, move |s| {
                let (r, _) = runs::get_run(s, &run)?;
                let dir = s.run_dir(&r.id);
                let kept: KeptTelemetry = std::fs::read(dir.join("telemetry.kept.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_else(|| {
                        crate::supervisor::read_telemetry(
                            &dir.join("tmp/divergent/telemetry.jsonl"),
                        )
                    });
                Ok(Telemetry {
                    run: r.id,
                    points: kept.points.into_iter().filter(|p| p.line > after).collect(),
                    bad_lines: kept
                        .bad_lines
                        .into_iter()
                        .filter(|b| b.line > after)
                        .collect(),
                    extra: Default::default(),
                })
            })
            .await?;
            Ok(json_resp(200, &t))
        }
        (&Method::GET, ["v1", "secrets"]) => {
            let list = blocking(&state, |s| Ok(s.store.secrets()?)).await?;
            Ok(json_resp(200, &json!({ "secrets": list })))
        }
        (&Method::PUT, ["v1", "secrets", name]) => {
            let name = name.to_string();
            if !name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(Failure::invalid(format!(
                    "`{name}` is not an environment variable name"
                )));
            }
            let body: SetSecret = read_json(req).await?;
            if let Some(problem) = crate::sandbox::env_value_problem("secret", &name, &body.value) {
                return Err(Failure::invalid(problem));
            }
            let info = blocking(&state, move |s| {
                s.store.set_secret(
                    &name,
                    &body.value,
                    &runs::now_rfc3339(crate::supervisor::now_ms()),
                )?;
                s.store
                    .secrets()?
                    .into_iter()
                    .find(|i| i.name == name)
                    .ok_or_else(|| Failure::new(500, "internal", "the secret vanished"))
            })
            .await?;
            Ok(json_resp(200, &info))
        }
        (&Method::DELETE, ["v1", "secrets", name]) => {
            let name = name.to_string();
            blocking(&state, move |s| {
                if s.store.delete_secret(&name)? {
                    Ok(())
                } else {
                    Err(Failure::not_found(format!("no secret `{name}`")))
                }
            })
            .await?;
            Ok(empty(204))
        }
        _ => Err(Failure::not_found(format!("no route `{method} {path}`"))),
    }
}

async fn upload(
    state: Arc<State>,
    volume: String,
    hash: String,
    q: &[(String, String)],
    req: Request<Incoming>,
) -> Result<Resp, Failure> {
    let offset: u64 = param(q, "offset")
        .unwrap_or_else(|| "0".into())
        .parse()
        .map_err(|_| Failure::new(400, "invalid", "`offset` is not a number"))?;
    let total: u64 = param(q, "total")
        .ok_or_else(|| Failure::new(400, "invalid", "`total` is required"))?
        .parse()
        .map_err(|_| Failure::new(400, "invalid", "`total` is not a number"))?;
    if !volumes::valid_hash(&hash) {
        return Err(Failure::new(
            400,
            "invalid",
            format!("`{hash}` is not a blake3 hash (64 lowercase hex digits)"),
        ));
    }
    // Uploads of one blob take turns: a second waits while the first appends, then finds the
    // blob whole (201) or resumes where the first stopped.
    let lock_state = Arc::clone(&state);
    let _turn = lock_state.uploads.lock(&volume, &hash).await;
    let (v2, h2) = (volume.clone(), hash.clone());
    let (have, partial, done) = blocking(&state, move |s| {
        volumes::require_volume(s, &v2)?;
        std::fs::create_dir_all(volumes::blob_dir(s, &v2).join("partial"))?;
        Ok((
            s.store.has_blob(&v2, &h2)?,
            volumes::partial_path(s, &v2, &h2),
            volumes::blob_path(s, &v2, &h2),
        ))
    })
    .await?;
    let _ = done;
    if have {
        let _ = read_body(req).await;
        return Ok(empty(201));
    }
    let received = tokio::fs::metadata(&partial).await.map_or(0, |m| m.len());
    if offset != received {
        return Err(Failure::new(
            409,
            "offset_mismatch",
            format!("the upload of `{hash}` is at byte {received}, not {offset}"),
        )
        .with_details(json!({ "received": received })));
    }
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&partial)
        .await?;
    let mut body = req.into_body();
    let full = |e: std::io::Error| {
        if runs::io_full(&e) {
            Failure::disk_full(&format!("storing the blob `{hash}`"))
        } else {
            Failure::from(e)
        }
    };
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            file.write_all(&data).await.map_err(full)?;
        }
    }
    file.flush().await.map_err(full)?;
    drop(file);
    let status = blocking(&state, move |s| {
        volumes::finish_upload(s, &volume, &hash, total)
    })
    .await?;
    Ok(empty(status))
}

/// A file of a volume as a response: its bytes with their length and an `etag` made of its
/// identity, size and modification time; from the byte a `range: bytes=N-` asks for (206,
/// with `content-range`) unless an `if-range` names another version of it (then all of it,
/// 200). A start at or past the end is 416. Other range forms are ignored (200), as HTTP
/// allows. Only the length announced is sent, so a file that grows meanwhile is cut there,
/// and one that cannot be read to that length ends the response short (an error at the
/// client, never a silently shorter file).
async fn file_response(
    file: &std::path::Path,
    range: Option<&str>,
    if_range: Option<&str>,
) -> Result<Resp, Failure> {
    use std::os::unix::fs::MetadataExt;
    let mut f = tokio::fs::File::open(file).await?;
    let meta = f.metadata().await?;
    let size = meta.len();
    let etag = format!(
        "\"{:x}-{:x}-{:x}-{:x}\"",
        meta.dev(),
        meta.ino(),
        size,
        meta.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec())
    );
    let start = range
        .and_then(|r| r.trim().strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|_| if_range.is_none_or(|v| v == etag));
    if let Some(start) = start
        && start >= size
    {
        let mut resp = fail(Failure::new(
            416,
            "invalid",
            format!("the file has {size} bytes; there is nothing from byte {start}"),
        ));
        if let Ok(range) = http::HeaderValue::from_str(&format!("bytes */{size}")) {
            resp.headers_mut().insert("content-range", range);
        }
        if let Ok(tag) = http::HeaderValue::from_str(&etag) {
            resp.headers_mut().insert("etag", tag);
        }
        return Ok(resp);
    }
    let from = start.unwrap_or(0);
    if from > 0 {
        f.seek(std::io::SeekFrom::Start(from)).await?;
    }
    let length = size - from;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut f = f.take(length);
        loop {
            let mut buf = bytes::BytesMut::with_capacity(256 << 10);
            match f.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(buf.freeze()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut resp = Response::builder()
        .status(if start.is_some() {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header("content-type", "application/octet-stream")
        .header("content-length", length)
        .header("accept-ranges", "bytes")
        .header("etag", &etag);
    if start.is_some() {
        resp = resp.header(
            "content-range",
            format!("bytes {from}-{}/{size}", size.saturating_sub(1)),
        );
    }
    Ok(resp
        .body(ChannelBody(rx).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())))
}

/// Sends the log from `offset` as frames; while following, polls the file and sends a beat
/// after each 5 s of silence, and the end frame once the run ended and every byte was sent.
///
/// While the file has unread bytes they are sent at once, up to 1 MiB a frame, without a
/// copy; only once caught up does it ask whether the run ended, and it waits 1 ms, doubling
/// up to 10 ms while nothing new arrives.
async fn log_stream(
    state: Arc<State>,
    id: String,
    mut offset: u64,
    follow: bool,
    tx: mpsc::Sender<Bytes>,
) {
    const IDLE_MIN: Duration = Duration::from_millis(1);
    const IDLE_MAX: Duration = Duration::from_millis(10);
    let path = state.run_dir(&id).join("log");
    let mut last_sent = tokio::time::Instant::now();
    let mut file: Option<std::fs::File> = None;
    let mut idle = IDLE_MIN;
    loop {
        let Some(progressed) = send_available(&path, &mut file, &mut offset, &tx).await else {
            return;
        };
        if progressed {
            last_sent = tokio::time::Instant::now();
            idle = IDLE_MIN;
            continue;
        }
        // Caught up. Whether the run had ended: then what the file holds now is all there is.
        let i2 = id.clone();
        let ended = match blocking(&state, move |s| runs::get_run(s, &i2)).await {
            Ok((r, _)) => r.status.is_terminal().then_some(r),
            Err(_) => return,
        };
        if let Some(run) = ended {
            loop {
                match send_available(&path, &mut file, &mut offset, &tx).await {
                    None => return,
                    Some(true) => {}
                    Some(false) => break,
                }
            }
            let _ = tx.send(div_api::logframe::encode_end(&run)).await;
            return;
        }
        if !follow {
            let _ = tx.send(div_api::logframe::encode_tail(offset)).await;
            return;
        }
        // The supervisor wrote the run's end: have the scheduler record it now rather than
        // at its next tick, so the end frame follows the last byte at once.
        if tokio::fs::try_exists(state.run_dir(&id).join("end.json"))
            .await
            .unwrap_or(false)
        {
            state.kick.notify_one();
            // Look again soon: the end is recorded within a tick's work.
            idle = IDLE_MIN;
        }
        if last_sent.elapsed() >= Duration::from_secs(5) {
            if tx
                .send(Bytes::from_static(div_api::logframe::BEAT))
                .await
                .is_err()
            {
                return;
            }
            last_sent = tokio::time::Instant::now();
        }
        tokio::time::sleep(idle).await;
        idle = (idle * 2).min(IDLE_MAX);
    }
}

/// Sends one read of the log from `offset` (at most 1 MiB) as a chunk frame: `Some(true)` if
/// bytes were sent, `Some(false)` if there were none (or no log yet), `None` if the client
/// is gone.
///
/// The read is std's, on a blocking thread, straight into the buffer that is sent (tokio's
/// `File` would read into its own buffer and copy); the file, kept open at its position,
/// travels to that thread and back.
async fn send_available(
    path: &std::path::Path,
    file: &mut Option<std::fs::File>,
    offset: &mut u64,
    tx: &mpsc::Sender<Bytes>,
) -> Option<bool> {
    const READ: u64 = 1 << 20;
    let open = file.take();
    let path = path.to_owned();
    let at = *offset;
    let read = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek};
        let mut f = match open {
            Some(f) => f,
            None => {
                let mut f = std::fs::File::open(&path).ok()?;
                f.seek(std::io::SeekFrom::Start(at)).ok()?;
                f
            }
        };
        let mut buf = Vec::with_capacity(READ as usize);
        let n = (&mut f).take(READ).read_to_end(&mut buf);
        Some((f, buf, n))
    })
    .await
    .ok()
    .flatten();
    let Some((f, buf, n)) = read else {
        return Some(false); // no log yet
    };
    match n {
        Ok(0) => {
            *file = Some(f);
            Some(false)
        }
        // Part of a failed read may be in `buf` and past the file's position: reopen at
        // `offset` next time.
        Err(_) => Some(false),
        Ok(n) => {
            *file = Some(f);
            let header = div_api::logframe::chunk_header(*offset, n as u64);
            if tx.send(Bytes::from(header)).await.is_err()
                || tx.send(Bytes::from(buf)).await.is_err()
            {
                return None;
            }
            *offset += n as u64;
            Some(true)
        }
    }
}

/// Aborts its task when dropped, so the scheduler stops with `serve` even when `serve`'s
/// future is dropped rather than shut down.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn serve_connection<S>(stream: S, state: Arc<State>, token: Option<Arc<String>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let io = hyper_util::rt::TokioIo::new(stream);
        let service =
            hyper::service::service_fn(move |req| handle(Arc::clone(&state), token.clone(), req));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
    });
}

pub(crate) async fn serve(
    options: ServerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let home = options.home.clone();
    let home_err = |source| ServerError::Home {
        path: home.clone(),
        source,
    };
    std::fs::create_dir_all(&home).map_err(home_err)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700))
            .map_err(home_err)?;
    }
    // The lock: held for as long as this server runs, so two never share a home.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(home.join("server.pid"))
        .map_err(home_err)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(ServerError::AlreadyRunning(home.clone()));
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(home_err(e)),
    }
    lock.set_len(0).map_err(home_err)?;
    std::io::Write::write_all(&mut &lock, format!("{}\n", std::process::id()).as_bytes())
        .map_err(home_err)?;

    let inventory = Inventory::load(&options.gpus)?;
    let sandboxed = match options.sandbox {
        crate::SandboxMode::None => false,
        crate::SandboxMode::Auto => sandbox::bwrap_works(),
        crate::SandboxMode::Bwrap => {
            if !sandbox::bwrap_works() {
                return Err(ServerError::NoSandbox);
            }
            true
        }
    };
    let store = crate::store::open_with_history(&home)?;
    {
        use std::os::unix::fs::PermissionsExt;
        for name in ["state.db", "state.db-wal", "state.db-shm"] {
            let _ =
                std::fs::set_permissions(home.join(name), std::fs::Permissions::from_mode(0o600));
        }
    }
    let state = Arc::new(State {
        home: home.clone(),
        store,
        inventory,
        sandboxed,
        supervisor: options.supervisor.clone(),
        cgroups: crate::cgroup::detect(),
        lock: std::sync::Mutex::new(()),
        uploads: Default::default(),
        kick: tokio::sync::Notify::new(),
    });
    // Reconcile before answering anything.
    {
        let s = Arc::clone(&state);
        let _ = tokio::task::spawn_blocking(move || runs::tick(&s)).await;
    }

    let socket = crate::socket_path(&home);
    let _ = std::fs::remove_file(&socket);
    let unix = tokio::net::UnixListener::bind(&socket).map_err(|source| ServerError::Listen {
        addr: socket.display().to_string(),
        source,
    })?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(home_err)?;
    }
    let tcp = match &options.tcp {
        Some(t) => {
            if !t.addr.ip().is_loopback() {
                return Err(ServerError::NotLoopback(t.addr));
            }
            let listener = tokio::net::TcpListener::bind(t.addr)
                .await
                .map_err(|source| ServerError::Listen {
                    addr: t.addr.to_string(),
                    source,
                })?;
            Some((listener, Arc::new(t.token.clone())))
        }
        None => None,
    };

    let scheduler = {
        let state = Arc::clone(&state);
        let tick = options.tick;
        AbortOnDrop(tokio::spawn(async move {
            loop {
                let s = Arc::clone(&state);
                let _ = tokio::task::spawn_blocking(move || runs::tick(&s)).await;
                tokio::select! {
                    () = tokio::time::sleep(tick) => {}
                    () = state.kick.notified() => {}
                }
            }
        }))
    };
    let accept = async {
        loop {
            tokio::select! {
                conn = unix.accept() => {
                    if let Ok((stream, _)) = conn {
                        serve_connection(stream, Arc::clone(&state), None);
                    }
                }
                conn = async {
                    match &tcp {
                        Some((l, _)) => l.accept().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let (Ok((stream, _)), Some((_, token))) = (conn, &tcp) {
                        serve_connection(stream, Arc::clone(&state), Some(Arc::clone(token)));
                    }
                }
            }
        }
    };
    tokio::select! {
        () = shutdown => {}
        () = accept => {}
    }
    drop(scheduler);
    let _ = std::fs::remove_file(&socket);
    // `state.db` self-contained once the server stops: the WAL copied in and emptied.
    {
        let s = Arc::clone(&state);
        let _ = tokio::task::spawn_blocking(move || s.store.checkpoint()).await;
    }
    drop(lock);
    Ok(())
}
