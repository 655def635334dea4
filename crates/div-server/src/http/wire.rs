//! What goes over the wire: response builders (JSON, empty, streamed, the error body) and
//! request readers (query parameters, percent-decoding, JSON bodies under a size limit).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use div_api::routes::TypedRoute;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited, combinators::BoxBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;

use super::error::{ErrorCode, HttpError};
use crate::server::{Server, spawn_work};

pub(crate) type Resp = Response<BoxBody<Bytes, Infallible>>;

/// A response body fed by a channel, for streams (logs, files).
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Bytes>);

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

/// A response of `status` holding `body`.
pub(crate) fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Resp {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", content_type)
        .body(Full::new(body.into()).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// `value` as JSON.
pub(crate) fn json(status: u16, value: &impl Serialize) -> Resp {
    match serde_json::to_vec(value) {
        Ok(body) => full(status, "application/json", body),
        Err(e) => fail(HttpError::internal(e.to_string())),
    }
}

/// `value` as `route`'s JSON answer: the table's answer type, and no other.
pub(crate) fn answer<Req, Answer: Serialize, T>(
    _route: &TypedRoute<Req, Answer, T>,
    status: u16,
    value: &Answer,
) -> Resp {
    json(status, value)
}

/// No body.
pub(crate) fn empty(status: u16) -> Resp {
    full(status, "application/json", Bytes::new())
}

/// The error body, `{"error": {"code", "message", "details"}}`, with the code's status.
pub(crate) fn fail(f: HttpError) -> Resp {
    // `details` is an object when there is one, and absent otherwise (the contract has no
    // `null` for it).
    let mut error = json!({"code": f.code.as_str(), "message": f.message});
    if !f.details.is_null() {
        error["details"] = f.details;
    }
    let retry_after = error["details"]["retry_after_seconds"].as_u64();
    let mut resp = full(
        f.code.status(),
        "application/json",
        serde_json::to_vec(&json!({ "error": error })).unwrap_or_default(),
    );
    // A caller slowed down is told when to try again, as HTTP says it.
    if f.code == ErrorCode::TooManyAttempts
        && let Some(seconds) = retry_after
    {
        resp.headers_mut()
            .insert(hyper::header::RETRY_AFTER, http::HeaderValue::from(seconds));
    }
    resp
}

/// A 200 whose body is what arrives on `rx`.
pub(crate) fn stream(content_type: &str, rx: mpsc::Receiver<Bytes>) -> Resp {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .body(ChannelBody(rx).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// The request's query, each key and value decoded (`application/x-www-form-urlencoded`:
/// `+` is a space, `%XX` a byte).
pub(crate) fn query(req: &Request<Incoming>) -> Vec<(String, String)> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode_query(k), decode_query(v))
        })
        .collect()
}

/// The first value of `key` in the query.
pub(crate) fn param(q: &[(String, String)], key: &str) -> Option<String> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// A header's value, when it has one that is text.
pub(crate) fn header(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A path segment, percent-decoded; `+` is itself there (it means a space only in a query).
/// Bytes that are not UTF-8 become U+FFFD, which no name holds.
pub(crate) fn decode_segment(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// A query key or value: `+` is a space, then percent-decoding.
fn decode_query(part: &str) -> String {
    decode_segment(&part.replace('+', " "))
}

/// The most a JSON request body may hold: a manifest of a million paths fits.
const MAX_JSON_BODY: usize = 64 << 20;

/// The whole body, refused past [`MAX_JSON_BODY`] (413).
pub(crate) async fn read_body(req: Request<Incoming>) -> Result<Bytes, HttpError> {
    // Gathered into one buffer of the size the request says (a pack is megabytes: grown
    // piece by piece, it was copied again and again), never more than the limit.
    let said = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_JSON_BODY);
    let mut body = Limited::new(req.into_body(), MAX_JSON_BODY);
    let mut gathered: Vec<u8> = Vec::with_capacity(said);
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    gathered.extend_from_slice(data);
                }
            }
            Err(e) if e.is::<LengthLimitError>() => {
                return Err(HttpError::new(
                    ErrorCode::TooLarge,
                    format!("the request body is larger than {MAX_JSON_BODY} bytes"),
                ));
            }
            Err(e) => {
                return Err(HttpError::malformed(format!(
                    "the request body could not be read: {e}"
                )));
            }
        }
    }
    Ok(Bytes::from(gathered))
}

/// The body as `T`.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, HttpError> {
    let body = read_body(req).await?;
    serde_json::from_slice(&body)
        .map_err(|e| HttpError::malformed(format!("the request is not valid JSON: {e}")))
}

/// `route`'s JSON request body: the table's request type.
pub(crate) async fn request<Req: serde::de::DeserializeOwned, Answer, T>(
    _route: &TypedRoute<Req, Answer, T>,
    req: Request<Incoming>,
) -> Result<Req, HttpError> {
    read_json(req).await
}

/// Runs blocking work (SQLite, files) off the async threads; its error becomes the answer.
pub(crate) async fn blocking<T: Send + 'static, E: Into<HttpError> + Send + 'static>(
    server: &std::sync::Arc<Server>,
    f: impl FnOnce(&Server) -> Result<T, E> + Send + 'static,
) -> Result<T, HttpError> {
    spawn_work(server, f)
        .await
        .map_err(|e| HttpError::internal(format!("a task failed: {e}")))?
        .map_err(Into::into)
}

/// `GET /v1/runs`'s query: `project`, `status`, `limit`, `cursor`, `placed_by` (empty ones are
/// absent).
pub(crate) fn list_query(q: &[(String, String)]) -> Result<div_api::ListRuns, HttpError> {
    let given = |key| param(q, key).filter(|v| !v.is_empty());
    Ok(div_api::ListRuns {
        project: given("project"),
        status: match given("status") {
            Some(s) => Some(
                s.parse::<div_api::RunStatus>()
                    .map_err(HttpError::malformed)?,
            ),
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
        placed_by: given("placed_by"),
    })
}

#[cfg(test)]
mod tests {
    use super::{decode_query, decode_segment};

    #[test]
    fn a_plus_in_a_path_segment_stays_a_plus() {
        assert_eq!(decode_segment("a+b"), "a+b");
        assert_eq!(decode_segment("a%2Bb"), "a+b");
        assert_eq!(decode_segment("a%20b"), "a b");
        assert_eq!(decode_segment("caf%C3%A9"), "café");
    }

    #[test]
    fn a_plus_in_a_query_is_a_space_and_percent_escapes_are_bytes() {
        assert_eq!(decode_query("a+b"), "a b");
        assert_eq!(decode_query("a%2Bb"), "a+b");
        assert_eq!(decode_query("code%2Fx%20y"), "code/x y");
    }

    #[test]
    fn broken_escapes_are_kept_and_bad_utf8_is_replaced() {
        assert_eq!(decode_segment("100%"), "100%");
        assert_eq!(decode_segment("%zz"), "%zz");
        assert_eq!(decode_segment("%ff"), "\u{fffd}");
    }
}
