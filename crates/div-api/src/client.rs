//! [`HttpControlPlane`]: the [`crate::ControlPlane`] spoken over HTTP/JSON, to a server at
//! an [`Endpoint`] (`http://`, `https://` or a Unix socket).
//!
//! This module holds the client itself and one request's life: building it, one try, and
//! the tries [`crate::retry`] allows until [`Options::deadline`] has passed since the call
//! began. The routes are in `routes.rs`; the three operations that resume across dropped
//! connections each have their own module (`upload.rs`, `read_file.rs`, `log_stream.rs`).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::Instant;

use crate::BlobSource;
use crate::display;
use crate::endpoint::Endpoint;
use crate::error::{ApiError, ErrorKind};
use crate::models::{ApiErrorBody, Health, Run};
use crate::options::Options;
use crate::retry::{self, Attempt, Backoff, Failure, GaveUp};
use crate::routes::{self, IDEMPOTENCY_KEY, Route};
use crate::transport::{self, Body, ReadFailure, Transport};

/// The [`crate::ControlPlane`] over HTTP/JSON. Cheap to clone (connections are pooled and
/// shared).
///
/// ```no_run
/// # async fn demo() -> Result<div_api::Catalogue, div_api::ApiError> {
/// use div_api::{ControlPlane, Endpoint, HttpControlPlane, Options, Token};
///
/// let endpoint = Endpoint::parse("https://api.example.com").expect("a valid address");
/// let options = Options { token: Some(Token::new("secret")), ..Options::default() };
/// let cp = HttpControlPlane::new(endpoint, options)?;
/// let catalogue = cp.catalogue().await?;
/// # Ok(catalogue) }
/// ```
#[derive(Clone)]
pub struct HttpControlPlane {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) endpoint: Endpoint,
    pub(crate) options: Options,
    authorization: Option<HeaderValue>,
    user_agent: HeaderValue,
    transport: Transport,
}

impl fmt::Debug for HttpControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpControlPlane")
            .field("endpoint", &self.inner.endpoint)
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

/// What one request sends.
pub(crate) struct Call<'a> {
    pub(crate) method: Method,
    /// Path and query after the endpoint's prefix, starting with `/`.
    pub(crate) path: String,
    pub(crate) body: CallBody,
    pub(crate) idempotency_key: Option<&'a str>,
    /// More headers (a `range` and `if-range` when a read resumes).
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

pub(crate) enum CallBody {
    Empty,
    Json(Bytes),
    Blob(BlobSource),
    /// Bytes already in memory, sent as `application/octet-stream` (a pack of small blobs).
    Bytes(Bytes),
}

impl<'a> Call<'a> {
    /// A request of `route` at `path` (its template filled in, with a query), no body.
    pub(crate) fn new(route: Route, path: String) -> Call<'a> {
        Call {
            method: Method::from_bytes(route.method().as_bytes())
                .expect("the route table's methods are HTTP's"),
            path,
            body: CallBody::Empty,
            idempotency_key: None,
            headers: Vec::new(),
        }
    }

    /// A request of `route` at `path` carrying `body` as JSON.
    pub(crate) fn with_json(route: Route, path: String, body: &impl Serialize) -> Call<'a> {
        let bytes = serde_json::to_vec(body).expect("the models serialize: maps have string keys");
        Call {
            body: CallBody::Json(Bytes::from(bytes)),
            ..Call::new(route, path)
        }
    }
}

/// Why one try failed.
enum TryFailure {
    /// No answer: the connection failed or broke.
    Transport(String),
    /// An answer that is not a success, and its body.
    Status(StatusCode, Bytes),
    /// Already the error to return.
    Error(ApiError),
}

/// What a successful try got.
enum Got {
    Full(StatusCode, Bytes),
    Stream(Response<Incoming>),
}

impl HttpControlPlane {
    /// A client for the control plane at `endpoint`. Fails only when the TLS roots cannot
    /// be loaded (`https://`) or the token cannot be sent in a header.
    pub fn new(endpoint: Endpoint, options: Options) -> Result<HttpControlPlane, ApiError> {
        let authorization = match &options.token {
            None => None,
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| {
                        ApiError::new(
                            ErrorKind::Refused,
                            "the token holds characters an HTTP header cannot carry",
                        )
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let user_agent = HeaderValue::from_str(&options.user_agent).map_err(|_| {
            ApiError::new(
                ErrorKind::Refused,
                format!(
                    "user agent `{}` holds characters an HTTP header cannot carry",
                    options.user_agent
                ),
            )
        })?;
        let transport = Transport::new(&endpoint)?;
        Ok(HttpControlPlane {
            inner: Arc::new(Inner {
                endpoint,
                options,
                authorization,
                user_agent,
                transport,
            }),
        })
    }

    /// Where it talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// `GET /v1/health`: whether the control plane is up, and its version.
    pub async fn health(&self) -> Result<Health, ApiError> {
        self.json(Call::new(Route::Health, routes::HEALTH.path(&[])))
            .await
    }

    /// The pauses between tries, and between resumptions.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(&self.inner.options)
    }

    /// When a call that begins now must have ended.
    pub(crate) fn deadline(&self) -> Instant {
        Instant::now() + self.inner.options.deadline
    }

    /// Scrub the token out of text that is about to become an error message.
    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.inner.options.token {
            Some(token) if !token.expose().is_empty() => text.replace(token.expose(), "<redacted>"),
            _ => text.to_owned(),
        }
    }

    async fn build(&self, call: &Call<'_>) -> Result<Request<Body>, ApiError> {
        let uri = self.inner.endpoint.uri(&call.path).map_err(|e| {
            ApiError::new(
                ErrorKind::Refused,
                self.redact(&format!("cannot make a request for `{}`: {e}", call.path)),
            )
        })?;
        let mut builder = Request::builder()
            .method(call.method.clone())
            .uri(uri)
            .header(USER_AGENT, self.inner.user_agent.clone());
        if let Some(auth) = &self.inner.authorization {
            builder = builder.header(AUTHORIZATION, auth.clone());
        }
        if let Some(key) = call.idempotency_key {
            builder = builder.header(IDEMPOTENCY_KEY, key);
        }
        for (name, value) in &call.headers {
            builder = builder.header(name, value.clone());
        }
        let body = match &call.body {
            CallBody::Empty => transport::empty(),
            CallBody::Json(bytes) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                transport::full(bytes.clone())
            }
            CallBody::Blob(source) => {
                builder = builder.header(CONTENT_TYPE, "application/octet-stream");
                transport::blob(source).await?
            }
            CallBody::Bytes(bytes) => {
                builder = builder.header(CONTENT_TYPE, "application/octet-stream");
                transport::full(bytes.clone())
            }
        };
        builder.body(body).map_err(|e| {
            ApiError::new(
                ErrorKind::Refused,
                self.redact(&format!("cannot make a request for `{}`: {e}", call.path)),
            )
        })
    }

    /// One try. A success's body is read whole unless `stream`; a failure is judged by the
    /// table in [`retry::classify`].
    async fn try_once(&self, call: &Call<'_>, stream: bool) -> Result<Got, Attempt<TryFailure>> {
        let blob = matches!(call.body, CallBody::Blob(_));
        // What the table says about `failure`, with `failure`'s own error.
        let judge = |failure: Failure, error: TryFailure| {
            let verdict = retry::classify(failure, blob);
            if verdict.retry {
                Attempt::Retry(error)
            } else {
                Attempt::Final(match error {
                    // Only an upload's cut connection is final (the upload resumes it).
                    TryFailure::Transport(e) => TryFailure::Error(ApiError::new(
                        verdict.kind,
                        format!(
                            "the upload `{} {}` was cut: {e}",
                            call.method,
                            self.redact(&call.path)
                        ),
                    )),
                    TryFailure::Status(status, body) => {
                        TryFailure::Error(self.status_error(status, &body))
                    }
                    error @ TryFailure::Error(_) => error,
                })
            }
        };
        let req = self
            .build(call)
            .await
            .map_err(|e| Attempt::Final(TryFailure::Error(e)))?;
        let resp = match self.inner.transport.request(req).await {
            Ok(resp) => resp,
            Err(e) => {
                if let Some(tls) = crate::tls::failure(&e) {
                    let message = crate::tls::message(&self.inner.endpoint, tls);
                    let error = ApiError::new(retry::classify(Failure::Tls, blob).kind, message);
                    return Err(judge(Failure::Tls, TryFailure::Error(error)));
                }
                let failure = if e.is_connect() {
                    Failure::Connect
                } else {
                    Failure::Cut
                };
                let text = self.redact(&display::error_chain(&e));
                return Err(judge(failure, TryFailure::Transport(text)));
            }
        };
        let status = resp.status();
        if status.is_success() && stream {
            return Ok(Got::Stream(resp));
        }
        let body = match transport::read_whole(resp.into_body()).await {
            Ok(body) => body,
            Err(ReadFailure::TooLarge) => {
                let error = ApiError::new(
                    retry::classify(Failure::TooLarge, blob).kind,
                    format!(
                        "the control plane's answer to `{} {}` is larger than {} bytes",
                        call.method,
                        self.redact(&call.path),
                        transport::MAX_ANSWER
                    ),
                );
                return Err(judge(Failure::TooLarge, TryFailure::Error(error)));
            }
            Err(ReadFailure::Cut(e)) => {
                return Err(judge(Failure::Cut, TryFailure::Transport(self.redact(&e))));
            }
        };
        if status.is_success() {
            Ok(Got::Full(status, body))
        } else {
            Err(judge(
                Failure::Status(status.as_u16()),
                TryFailure::Status(status, body),
            ))
        }
    }

    /// Try `call` until it succeeds, fails for good, or `until` passes.
    async fn send(&self, call: &Call<'_>, stream: bool, until: Instant) -> Result<Got, ApiError> {
        let started = Instant::now();
        let endpoint = &self.inner.endpoint;
        let ended = retry::retry(self.backoff(), until, || self.try_once(call, stream)).await;
        let failure = match ended {
            Ok(got) => return Ok(got),
            Err(failure) => failure,
        };
        Err(match failure {
            GaveUp::Final(TryFailure::Error(e)) => e,
            GaveUp::Final(TryFailure::Transport(e)) => ApiError::new(ErrorKind::Unavailable, e),
            GaveUp::Final(TryFailure::Status(status, body)) => self.status_error(status, &body),
            GaveUp::TimedOut { tries, last } => {
                // The last answer the server did give (a 429's `too_many_attempts`) keeps its
                // code and details, so what the caller says of that answer is still said.
                let server = match &last {
                    Some(TryFailure::Status(status, body)) => {
                        Some(self.status_error(*status, body))
                    }
                    _ => None,
                };
                let what = match (&last, &server) {
                    (_, Some(server)) => format!(": {}", server.message()),
                    (Some(TryFailure::Transport(e)), _) => format!(": {e}"),
                    (Some(TryFailure::Error(e)), _) => format!(": {}", e.message()),
                    _ => String::new(),
                };
                let message = format!(
                    "the control plane at `{endpoint}` did not answer `{} {}` within {} ({}){what}",
                    call.method,
                    self.redact(&call.path),
                    display::duration(until.saturating_duration_since(started)),
                    display::tries(tries),
                );
                match &server {
                    Some(server) => unavailable_keeping_code(server, message),
                    None => ApiError::new(ErrorKind::Unavailable, message),
                }
            }
            GaveUp::Exhausted { tries, last } => {
                let elapsed = display::duration(started.elapsed());
                match last {
                    TryFailure::Status(status, body) => {
                        let server = self.status_error(status, &body);
                        let message = format!(
                            "the control plane at `{endpoint}` kept failing after {} over {elapsed}: {}",
                            display::tries(tries),
                            server.message()
                        );
                        unavailable_keeping_code(&server, message)
                    }
                    TryFailure::Transport(e) => ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "could not reach the control plane at `{endpoint}` after {} over {elapsed}: {e}",
                            display::tries(tries)
                        ),
                    ),
                    TryFailure::Error(e) => e,
                }
            }
        })
    }

    /// Send `call` and read its JSON answer, a run, keeping fields sent as `null`.
    pub(crate) async fn run_json(&self, call: Call<'_>) -> Result<Run, ApiError> {
        let raw: Value = self.json(call).await?;
        let mut run: Run = serde_json::from_value(raw.clone()).map_err(|e| {
            ApiError::new(
                ErrorKind::Protocol,
                format!("could not read the control plane's run: {e}"),
            )
        })?;
        run.keep_nulls_from(&raw);
        Ok(run)
    }

    /// Send `call` and read its JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T, ApiError> {
        match self.send(&call, false, self.deadline()).await? {
            Got::Full(_, body) => serde_json::from_slice(&body).map_err(|e| {
                ApiError::new(
                    ErrorKind::Protocol,
                    format!(
                        "could not read the control plane's answer to `{} {}`: {e}",
                        call.method,
                        self.redact(&call.path)
                    ),
                )
            }),
            Got::Stream(_) => unreachable!("send(stream = false) reads the whole body"),
        }
    }

    /// Send `call` and expect no body back.
    pub(crate) async fn empty(&self, call: Call<'_>) -> Result<StatusCode, ApiError> {
        match self.send(&call, false, self.deadline()).await? {
            Got::Full(status, _) => Ok(status),
            Got::Stream(_) => unreachable!("send(stream = false) reads the whole body"),
        }
    }

    /// Send `call` and hand back the response whose body streams; tries end at `until`.
    pub(crate) async fn stream(
        &self,
        call: Call<'_>,
        until: Instant,
    ) -> Result<Response<Incoming>, ApiError> {
        match self.send(&call, true, until).await? {
            Got::Stream(resp) => Ok(resp),
            Got::Full(..) => unreachable!("send(stream = true) leaves a success's body"),
        }
    }

    /// The error for a final, non-success answer: its kind from the table in
    /// [`retry::classify`], its code, message and details from the body when the server
    /// sent the contract's error.
    fn status_error(&self, status: StatusCode, body: &[u8]) -> ApiError {
        let kind = retry::classify(Failure::Status(status.as_u16()), false).kind;
        match serde_json::from_slice::<ApiErrorBody>(body) {
            Ok(ApiErrorBody { error }) => {
                ApiError::from_server(kind, error.code, self.redact(&error.message), error.details)
            }
            Err(_) => ApiError::new(
                kind,
                format!(
                    "the control plane at `{}` answered `{status}`",
                    self.inner.endpoint
                ),
            ),
        }
    }
}

/// An unavailable error saying `message` that keeps `server`'s code and details, where its
/// answer had a code (what a caller says of that answer, a hint, hangs on it).
fn unavailable_keeping_code(server: &ApiError, message: String) -> ApiError {
    match server.code() {
        Some(code) => ApiError::from_server(
            ErrorKind::Unavailable,
            code.to_owned(),
            message,
            server.details().clone(),
        ),
        None => ApiError::new(ErrorKind::Unavailable, message),
    }
}
