//! [`HttpControlPlane`]: the [`ControlPlane`] spoken over HTTP/JSON, to a server at an
//! [`Endpoint`] (`http://`, `https://` or a Unix socket).
//!
//! Every route of the contract is idempotent (runs by their `Idempotency-Key`), so every
//! request is retried on connection errors, 429 and 5xx, with exponential backoff and jitter,
//! until [`Options::deadline`] has passed since the call began.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Frame as BodyFrame, Incoming, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncSeekExt, AsyncWriteExt, ReadBuf};
use tokio::time::Instant;

use crate::error::{ApiError, ErrorKind, error_chain};
use crate::logframe::{self, Decoder, Frame};
use crate::models::*;
use crate::{BlobSource, ByteSink, ControlPlane, LogStream};
use serde_json::Value;

/// Every route the client calls, as `(method, path template)`; the OpenAPI document declares
/// exactly these (a test checks it).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("GET", "/v1/catalogue"),
    ("GET", "/v1/volumes"),
    ("POST", "/v1/volumes"),
    ("DELETE", "/v1/volumes/{name}"),
    ("POST", "/v1/volumes/{name}/blobs/missing"),
    ("PUT", "/v1/volumes/{name}/blobs/{hash}"),
    ("POST", "/v1/volumes/{name}/trees"),
    ("GET", "/v1/volumes/{name}/tree"),
    ("GET", "/v1/volumes/{name}/file"),
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/{run}"),
    ("POST", "/v1/runs/{run}/stop"),
    ("GET", "/v1/runs/{run}/log"),
    ("GET", "/v1/runs/{run}/result"),
    ("GET", "/v1/runs/{run}/telemetry"),
    ("GET", "/v1/secrets"),
    ("PUT", "/v1/secrets/{name}"),
    ("DELETE", "/v1/secrets/{name}"),
];

/// The header carrying a run creation's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The largest JSON answer the client reads, in bytes.
const MAX_JSON: usize = 256 << 20;

// ---------------------------------------------------------------------------------------
// Endpoint

/// Where a control plane listens: `http://host:port[/prefix]`, `https://…` or
/// `unix:///path/to/socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    scheme: Scheme,
    /// `host:port` (empty for a socket).
    authority: String,
    /// A path prefix without its trailing `/`, like `/api` (often empty).
    prefix: String,
    socket: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
    Unix,
}

/// The error returned by [`Endpoint::parse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// Not one of the three forms.
    #[error("control plane address `{0}` is not `https://…`, `http://…` or `unix:///path`")]
    Scheme(String),
    /// No host, or one that is not a host.
    #[error("control plane address `{0}` has no valid host")]
    Host(String),
    /// A `user:password@` part; the address is not repeated, it holds a credential.
    #[error("the control plane address holds credentials (`user@host`); pass the token separately")]
    Credentials,
    /// A query or fragment.
    #[error("control plane address `{0}` has a query or fragment")]
    Query(String),
    /// A socket path that is not absolute.
    #[error("socket path in `{0}` is not absolute: write `unix:///path/to/socket`")]
    SocketPath(String),
}

impl Endpoint {
    /// Parse `https://…`, `http://…` or `unix:///path/to/socket`.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        if let Some(path) = text.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(EndpointError::SocketPath(text.to_owned()));
            }
            return Ok(Endpoint::unix(path));
        }
        let (scheme, rest) = if let Some(rest) = text.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = text.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(EndpointError::Scheme(text.to_owned()));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(EndpointError::Credentials);
        }
        if path.contains(['?', '#']) || authority.contains(['?', '#']) {
            return Err(EndpointError::Query(text.to_owned()));
        }
        if authority.is_empty()
            || authority.contains(char::is_whitespace)
            || http::uri::Authority::from_str(authority).is_err()
        {
            return Err(EndpointError::Host(text.to_owned()));
        }
        if path.contains(char::is_whitespace) {
            return Err(EndpointError::Host(text.to_owned()));
        }
        Ok(Endpoint {
            scheme,
            authority: authority.to_owned(),
            prefix: path.trim_end_matches('/').to_owned(),
            socket: None,
        })
    }

    /// The control plane on the Unix socket at `path`.
    pub fn unix(path: impl Into<PathBuf>) -> Endpoint {
        Endpoint {
            scheme: Scheme::Unix,
            authority: String::new(),
            prefix: String::new(),
            socket: Some(path.into()),
        }
    }

    /// Whether it is a Unix socket.
    pub fn is_unix(&self) -> bool {
        self.scheme == Scheme::Unix
    }

    /// The URI of `path_and_query` (which starts with `/`) on this endpoint.
    fn uri(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let uri = match self.scheme {
            // The connector ignores the host; hyper wants one.
            Scheme::Unix => format!("http://localhost{path_and_query}"),
            Scheme::Http => format!("http://{}{}{path_and_query}", self.authority, self.prefix),
            Scheme::Https => format!("https://{}{}{path_and_query}", self.authority, self.prefix),
        };
        Ok(Uri::try_from(uri)?)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.scheme, &self.socket) {
            (Scheme::Unix, Some(path)) => write!(f, "unix://{}", path.display()),
            (Scheme::Https, _) => write!(f, "https://{}{}", self.authority, self.prefix),
            _ => write!(f, "http://{}{}", self.authority, self.prefix),
        }
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

// ---------------------------------------------------------------------------------------
// Token and options

/// A bearer token. Never shown: `Debug` and `Display` print `<redacted>`, and the client
/// scrubs it from every error message.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wrap a token the caller read (from its settings; this crate reads no environment).
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }
    /// The token itself, to put on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How an [`HttpControlPlane`] behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sent as `Authorization: Bearer <token>` when set.
    pub token: Option<Token>,
    /// How long one call may take, retries included; for a log stream, how long it may go
    /// without receiving anything (the server beats every few seconds while following).
    pub deadline: Duration,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// The first retry's backoff; each next one doubles, up to `max_backoff`, with jitter.
    pub initial_backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token: None,
            deadline: Duration::from_secs(30),
            user_agent: format!("div/{}", env!("CARGO_PKG_VERSION")),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Transport

type Body = BoxBody<Bytes, io::Error>;

#[derive(Clone)]
enum Transport {
    Http(Client<HttpConnector, Body>),
    Https(Client<HttpsConnector<HttpConnector>, Body>),
    Unix(Client<UnixConnector, Body>),
}

impl Transport {
    fn request(&self, req: Request<Body>) -> hyper_util::client::legacy::ResponseFuture {
        match self {
            Transport::Http(c) => c.request(req),
            Transport::Https(c) => c.request(req),
            Transport::Unix(c) => c.request(req),
        }
    }
}

/// Connects every request to one Unix socket.
#[derive(Debug, Clone)]
struct UnixConnector(Arc<PathBuf>);

impl tower_service::Service<Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let path = Arc::clone(&self.0);
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&*path).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// `len` bytes of an open file, as a request body.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Box<[u8]>,
}

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<BodyFrame<Bytes>, io::Error>>> {
        let this = &mut *self;
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining)
            .unwrap_or(usize::MAX)
            .min(this.buf.len());
        let mut read_buf = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut read_buf) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = read_buf.filled().len();
                if n == 0 {
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file ended before the blob did",
                    ))));
                }
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(BodyFrame::data(Bytes::copy_from_slice(
                    read_buf.filled(),
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

// ---------------------------------------------------------------------------------------
// The client

/// The [`ControlPlane`] over HTTP/JSON. Cheap to clone (connections are pooled and shared).
///
/// ```no_run
/// # async fn demo() -> Result<(), div_api::ApiError> {
/// use div_api::{ControlPlane, Endpoint, HttpControlPlane, Options, Token};
///
/// let endpoint = Endpoint::parse("https://api.example.com").expect("a valid address");
/// let options = Options { token: Some(Token::new("secret")), ..Options::default() };
/// let cp = HttpControlPlane::new(endpoint, options)?;
/// let catalogue = cp.catalogue().await?;
/// # let _ = catalogue;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HttpControlPlane {
    inner: Arc<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    options: Options,
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
struct Call<'a> {
    method: Method,
    /// Path and query after the endpoint's prefix, starting with `/`.
    path: String,
    body: CallBody,
    idempotency_key: Option<&'a str>,
    /// More headers (a `range` and `if-range` when a read resumes).
    headers: Vec<(http::header::HeaderName, HeaderValue)>,
}

enum CallBody {
    Empty,
    Json(Bytes),
    Blob(BlobSource),
}

/// Why one try failed.
enum TryFailure {
    /// Worth another try: a connection error.
    Transport(String),
    /// Worth another try: 429 or 5xx.
    Status(StatusCode, Bytes),
    /// Not worth another: the answer is final.
    Final(ApiError),
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
        let builder = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(Duration::from_secs(30));
            b
        };
        let transport = match endpoint.scheme {
            Scheme::Http => Transport::Http(builder().build(HttpConnector::new())),
            Scheme::Https => {
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
                    .map_err(|e| {
                        ApiError::new(
                            ErrorKind::Io,
                            format!("could not load this machine's TLS root certificates: {e}"),
                        )
                    })?
                    .https_only()
                    .enable_http1()
                    .build();
                Transport::Https(builder().build(https))
            }
            Scheme::Unix => {
                let path = endpoint
                    .socket
                    .clone()
                    .expect("a unix endpoint has a socket path");
                Transport::Unix(builder().build(UnixConnector(Arc::new(path))))
            }
        };
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
        self.json(Call::get("/v1/health".to_owned())).await
    }

    /// Scrub the token out of text that is about to become an error message.
    fn redact(&self, text: &str) -> String {
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
        let body: Body = match &call.body {
            CallBody::Empty => http_body_util::Empty::new()
                .map_err(|never| match never {})
                .boxed(),
            CallBody::Json(bytes) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                http_body_util::Full::new(bytes.clone())
                    .map_err(|never| match never {})
                    .boxed()
            }
            CallBody::Blob(source) => {
                builder = builder.header(CONTENT_TYPE, "application/octet-stream");
                match source {
                    BlobSource::Bytes(bytes) => http_body_util::Full::new(bytes.clone())
                        .map_err(|never| match never {})
                        .boxed(),
                    BlobSource::File { path, offset, len } => {
                        let io_error = |e: io::Error| {
                            ApiError::new(
                                ErrorKind::Io,
                                format!("could not read `{}`: {e}", path.display()),
                            )
                            .with_source(e)
                        };
                        let mut file = tokio::fs::File::open(path).await.map_err(io_error)?;
                        file.seek(io::SeekFrom::Start(*offset))
                            .await
                            .map_err(io_error)?;
                        let buf_len = usize::try_from(*len)
                            .unwrap_or(usize::MAX)
                            .clamp(1, 256 << 10);
                        FileBody {
                            file,
                            remaining: *len,
                            buf: vec![0; buf_len].into_boxed_slice(),
                        }
                        .boxed()
                    }
                }
            }
        };
        builder.body(body).map_err(|e| {
            ApiError::new(
                ErrorKind::Refused,
                self.redact(&format!("cannot make a request for `{}`: {e}", call.path)),
            )
        })
    }

    /// One try, bounded by `until`.
    async fn try_once(&self, call: &Call<'_>, stream: bool) -> Result<Got, TryFailure> {
        let req = self.build(call).await.map_err(TryFailure::Final)?;
        let resp = self
            .inner
            .transport
            .request(req)
            .await
            .map_err(|e| match tls_failure(&e) {
                // Trying again meets the same certificate: final.
                Some(tls) => {
                    TryFailure::Final(ApiError::new(ErrorKind::Unavailable, self.tls_message(tls)))
                }
                None => TryFailure::Transport(self.redact(&error_chain(&e))),
            })?;
        let status = resp.status();
        if status.is_success() && stream {
            return Ok(Got::Stream(resp));
        }
        let body = Limited(resp.into_body())
            .collect()
            .await
            .map_err(|e| TryFailure::Transport(self.redact(&e)))?;
        if status.is_success() {
            Ok(Got::Full(status, body))
        } else if status == StatusCode::TOO_MANY_REQUESTS
            || (status.is_server_error() && status != StatusCode::INSUFFICIENT_STORAGE)
        {
            Err(TryFailure::Status(status, body))
        } else {
            Err(TryFailure::Final(self.status_error(status, &body)))
        }
    }

    /// Try `call` until it succeeds, fails for good, or the deadline passes.
    async fn send(&self, call: &Call<'_>, stream: bool, until: Instant) -> Result<Got, ApiError> {
        let started = Instant::now();
        let mut tries: u32 = 0;
        let mut last: Option<TryFailure> = None;
        loop {
            tries += 1;
            match tokio::time::timeout_at(until, self.try_once(call, stream)).await {
                Err(_elapsed) => {
                    let what = match last {
                        Some(TryFailure::Transport(e)) => format!(": {e}"),
                        Some(TryFailure::Status(status, body)) => {
                            format!(": {}", self.status_error(status, &body).message())
                        }
                        _ => String::new(),
                    };
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "the control plane at `{}` did not answer `{} {}` within {} ({}){what}",
                            self.inner.endpoint,
                            call.method,
                            self.redact(&call.path),
                            seconds(until.saturating_duration_since(started)),
                            plural_tries(tries),
                        ),
                    ));
                }
                Ok(Ok(got)) => return Ok(got),
                Ok(Err(TryFailure::Final(e))) => return Err(e),
                Ok(Err(TryFailure::Transport(e))) if matches!(call.body, CallBody::Blob(_)) => {
                    // Part of a blob may have arrived: `upload_blob` asks how much before it
                    // sends again, rather than sending it all a second time.
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "the upload `{} {}` was cut: {e}",
                            call.method,
                            self.redact(&call.path)
                        ),
                    ));
                }
                Ok(Err(failure)) => last = Some(failure),
            }
            let pause = backoff(&self.inner.options, tries);
            if Instant::now() + pause >= until {
                let elapsed = seconds(started.elapsed());
                let endpoint = &self.inner.endpoint;
                return Err(match last {
                    Some(TryFailure::Status(status, body)) => {
                        let server = self.status_error(status, &body);
                        let message = format!(
                            "the control plane at `{endpoint}` kept failing after {} over {elapsed}: {}",
                            plural_tries(tries),
                            server.message()
                        );
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
                    Some(TryFailure::Transport(e)) => ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "could not reach the control plane at `{endpoint}` after {} over {elapsed}: {e}",
                            plural_tries(tries)
                        ),
                    ),
                    _ => ApiError::new(
                        ErrorKind::Unavailable,
                        format!("could not reach the control plane at `{endpoint}`"),
                    ),
                });
            }
            tracing::debug!(tries, ?pause, path = %self.redact(&call.path), "retrying");
            tokio::time::sleep(pause).await;
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.options.deadline
    }

    /// What to say when the TLS handshake with the control plane failed.
    fn tls_message(&self, tls: &rustls::Error) -> String {
        let endpoint = &self.inner.endpoint;
        match tls {
            rustls::Error::InvalidCertificate(why) => format!(
                "the control plane at `{endpoint}` presented a certificate this machine does not trust ({why:?}); \
                 if it is signed by a private CA, point SSL_CERT_FILE at that CA's certificate (PEM)"
            ),
            other => {
                format!("the TLS handshake with the control plane at `{endpoint}` failed: {other}")
            }
        }
    }

    /// Send `call` and read its JSON answer, a run, keeping fields sent as `null`.
    async fn run_json(&self, call: Call<'_>) -> Result<Run, ApiError> {
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
    async fn json<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T, ApiError> {
        Ok(self.json_status(call).await?.1)
    }

    async fn json_status<T: DeserializeOwned>(
        &self,
        call: Call<'_>,
    ) -> Result<(StatusCode, T), ApiError> {
        match self.send(&call, false, self.deadline()).await? {
            Got::Full(status, body) => {
                let value = serde_json::from_slice(&body).map_err(|e| {
                    ApiError::new(
                        ErrorKind::Protocol,
                        format!(
                            "could not read the control plane's answer to `{} {}`: {e}",
                            call.method,
                            self.redact(&call.path)
                        ),
                    )
                })?;
                Ok((status, value))
            }
            Got::Stream(_) => unreachable!("send(stream = false) reads the whole body"),
        }
    }

    /// Send `call` and expect no body back.
    async fn empty(&self, call: Call<'_>) -> Result<StatusCode, ApiError> {
        match self.send(&call, false, self.deadline()).await? {
            Got::Full(status, _) => Ok(status),
            Got::Stream(_) => unreachable!("send(stream = false) reads the whole body"),
        }
    }

    /// Send `call` and hand back the response whose body streams.
    async fn stream(&self, call: Call<'_>, until: Instant) -> Result<Response<Incoming>, ApiError> {
        match self.send(&call, true, until).await? {
            Got::Stream(resp) => Ok(resp),
            Got::Full(..) => unreachable!("send(stream = true) leaves a success's body"),
        }
    }

    /// The error for a final, non-success answer.
    fn status_error(&self, status: StatusCode, body: &[u8]) -> ApiError {
        let kind = match status.as_u16() {
            404 | 410 => ErrorKind::NotFound,
            401 | 403 => ErrorKind::Unauthorized,
            409 => ErrorKind::Conflict,
            // A full disk is not fixed by trying again soon: refused, not retried.
            507 => ErrorKind::Refused,
            429 | 500..=599 => ErrorKind::Unavailable,
            400..=499 => ErrorKind::Refused,
            _ => ErrorKind::Protocol,
        };
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

    async fn open_log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
        until: Instant,
    ) -> Result<Incoming, ApiError> {
        let call = Call::get(format!(
            "/v1/runs/{}/log?offset={offset}&follow={follow}",
            segment(run)
        ));
        let resp = self.stream(call, until).await?;
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type.starts_with(logframe::MEDIA_TYPE) {
            return Err(ApiError::new(
                ErrorKind::Protocol,
                format!(
                    "the control plane sent the log of `{run}` as `{content_type}`, not `{}`",
                    logframe::MEDIA_TYPE
                ),
            ));
        }
        Ok(resp.into_body())
    }

    async fn upload_once(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        let call = Call {
            method: Method::PUT,
            path: format!(
                "/v1/volumes/{}/blobs/{}?offset={offset}&total={total}",
                segment(volume),
                segment(hash)
            ),
            body: CallBody::Blob(data),
            idempotency_key: None,
            headers: Vec::new(),
        };
        self.empty(call).await.map(drop)
    }
}

impl<'a> Call<'a> {
    fn get(path: String) -> Call<'a> {
        Call {
            method: Method::GET,
            path,
            body: CallBody::Empty,
            idempotency_key: None,
            headers: Vec::new(),
        }
    }
    fn delete(path: String) -> Call<'a> {
        Call {
            method: Method::DELETE,
            ..Call::get(path)
        }
    }
    fn with_json(method: Method, path: String, body: &impl Serialize) -> Call<'a> {
        let bytes = serde_json::to_vec(body).expect("the models serialize: maps have string keys");
        Call {
            method,
            path,
            body: CallBody::Json(Bytes::from(bytes)),
            idempotency_key: None,
            headers: Vec::new(),
        }
    }
}

#[async_trait]
impl ControlPlane for HttpControlPlane {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.json(Call::get("/v1/catalogue".to_owned())).await
    }

    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        #[derive(serde::Deserialize)]
        struct List {
            volumes: Vec<Volume>,
        }
        let list: List = self.json(Call::get("/v1/volumes".to_owned())).await?;
        Ok(list.volumes)
    }

    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError> {
        let body = CreateVolume {
            name: name.to_owned(),
        };
        self.json(Call::with_json(
            Method::POST,
            "/v1/volumes".to_owned(),
            &body,
        ))
        .await
    }

    async fn delete_volume(&self, name: &str) -> Result<(), ApiError> {
        self.empty(Call::delete(format!("/v1/volumes/{}", segment(name))))
            .await
            .map(drop)
    }

    async fn missing_blobs(
        &self,
        volume: &str,
        hashes: &[String],
    ) -> Result<MissingBlobs, ApiError> {
        let body = MissingBlobsRequest {
            hashes: hashes.to_vec(),
        };
        self.json(Call::with_json(
            Method::POST,
            format!("/v1/volumes/{}/blobs/missing", segment(volume)),
            &body,
        ))
        .await
    }

    async fn upload_blob(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        // A try whose connection dropped may have left bytes behind: the server then says how
        // many it holds (409 `offset_mismatch`), and the upload goes on from there.
        let mut offset = offset;
        let mut data = data;
        let mut resumes = 0;
        loop {
            match self
                .upload_once(volume, hash, offset, total, data.clone())
                .await
            {
                Err(e) if e.code() == Some("offset_mismatch") && resumes < 8 => {
                    let Some(received) = e.details().get("received").and_then(|v| v.as_u64())
                    else {
                        return Err(e);
                    };
                    if received <= offset || received > total {
                        return Err(e);
                    }
                    data = data.skip(received - offset);
                    offset = received;
                    resumes += 1;
                }
                Err(e) if e.is_unavailable() && resumes < 8 => {
                    // The connection was cut: ask how much arrived and send only the rest.
                    resumes += 1;
                    tokio::time::sleep(backoff(&self.inner.options, resumes)).await;
                    let missing = self.missing_blobs(volume, &[hash.to_owned()]).await?;
                    if !missing.missing.iter().any(|h| h == hash) {
                        return Ok(());
                    }
                    let received = missing.partial.get(hash).copied().unwrap_or(0);
                    if received < offset || received > total {
                        // What arrived is gone: the caller sends the whole blob again.
                        return Err(e);
                    }
                    data = data.skip(received - offset);
                    offset = received;
                }
                other => return other,
            }
        }
    }

    async fn commit_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<CommittedTree, ApiError> {
        self.json(Call::with_json(
            Method::POST,
            format!("/v1/volumes/{}/trees", segment(volume)),
            tree,
        ))
        .await
    }

    async fn list_tree(&self, volume: &str, path: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        #[derive(serde::Deserialize)]
        struct List {
            entries: Vec<VolumeEntry>,
        }
        let list: List = self
            .json(Call::get(format!(
                "/v1/volumes/{}/tree?path={}",
                segment(volume),
                query_value(path)
            )))
            .await?;
        Ok(list.entries)
    }

    async fn read_file(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        let deadline = self.inner.options.deadline;
        let mut written = 0u64;
        // The first answer's `etag` and the file's whole length, when the server said them.
        let mut etag: Option<HeaderValue> = None;
        let mut total: Option<u64> = None;
        let mut reconnects = 0u32;
        let mut last_progress = Instant::now();
        loop {
            let until = last_progress + deadline;
            if reconnects > 0 {
                let pause = backoff(&self.inner.options, reconnects);
                if Instant::now() + pause >= until {
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "lost `{path}` at byte {written} and could not resume it within {}",
                            seconds(deadline)
                        ),
                    ));
                }
                tokio::time::sleep(pause).await;
            }
            reconnects += 1;
            let mut call = Call::get(format!(
                "/v1/volumes/{}/file?path={}",
                segment(volume),
                query_value(path)
            ));
            if written > 0 {
                // The rest, and only of the same version of the file.
                if let Ok(range) = HeaderValue::from_str(&format!("bytes={written}-")) {
                    call.headers.push((http::header::RANGE, range));
                }
                if let Some(tag) = &etag {
                    call.headers.push((http::header::IF_RANGE, tag.clone()));
                }
            }
            let resp = self.stream(call, until).await?;
            let headers = resp.headers();
            let length = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let this_etag = headers.get(http::header::ETAG).cloned();
            // Where this answer starts: 206 says with `content-range`; 200 is from byte 0.
            let from = if resp.status() == StatusCode::PARTIAL_CONTENT {
                headers
                    .get(http::header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("bytes "))
                    .and_then(|v| v.split('-').next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorKind::Protocol,
                            format!(
                                "the control plane at `{}` sent part of `{path}` without saying which",
                                self.inner.endpoint
                            ),
                        )
                    })?
            } else {
                0
            };
            if written > 0 {
                let changed = match (&etag, &this_etag) {
                    (Some(a), Some(b)) => a != b,
                    _ => false,
                };
                if changed {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!(
                            "`{path}` in volume `{volume}` changed while it was being read (after {written} bytes); read it again"
                        ),
                    ));
                }
                if from > written {
                    return Err(ApiError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the control plane at `{}` resumed `{path}` at byte {from}, not {written}",
                            self.inner.endpoint
                        ),
                    ));
                }
            } else {
                etag = this_etag;
            }
            if total.is_none() {
                total = length.map(|l| from + l);
            }
            // Bytes of this answer already written (a server that ignored the range).
            let mut skip = written - from;
            let mut body = resp.into_body();
            loop {
                let until = last_progress + deadline;
                let frame = match tokio::time::timeout_at(until, body.frame()).await {
                    Err(_) => {
                        return Err(ApiError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "the control plane at `{}` sent nothing of `{path}` for {}",
                                self.inner.endpoint,
                                seconds(deadline)
                            ),
                        ));
                    }
                    Ok(None) => {
                        if total.is_some_and(|t| written < t) {
                            break; // ended short: resume
                        }
                        return flush(sink, path, written).await;
                    }
                    // Broken after the last byte: nothing is missing.
                    Ok(Some(Err(_))) if total.is_some_and(|t| written >= t) => {
                        return flush(sink, path, written).await;
                    }
                    Ok(Some(Err(e))) => {
                        tracing::debug!(
                            path,
                            written,
                            error = %self.redact(&error_chain(&e)),
                            "file read dropped; resuming"
                        );
                        break;
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                if let Ok(mut data) = frame.into_data() {
                    if skip > 0 {
                        let n = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
                        data = data.slice(n..);
                        skip -= n as u64;
                    }
                    if data.is_empty() {
                        continue;
                    }
                    sink.write_all(&data).await.map_err(|e| {
                        ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}"))
                            .with_source(e)
                    })?;
                    written += data.len() as u64;
                    last_progress = Instant::now();
                    reconnects = 1;
                }
            }
        }
    }

    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError> {
        let mut call = Call::with_json(Method::POST, "/v1/runs".to_owned(), run);
        call.idempotency_key = Some(idempotency_key);
        if HeaderValue::from_str(idempotency_key).is_err() {
            return Err(ApiError::new(
                ErrorKind::Refused,
                format!("idempotency key `{idempotency_key}` is not a valid header value"),
            ));
        }
        self.run_json(call).await
    }

    async fn get_run(&self, run: &str) -> Result<Run, ApiError> {
        self.run_json(Call::get(format!("/v1/runs/{}", segment(run))))
            .await
    }

    async fn list_runs(&self, query: &ListRuns) -> Result<RunList, ApiError> {
        let mut params = Vec::new();
        if let Some(project) = &query.project {
            params.push(format!("project={}", query_value(project)));
        }
        if let Some(status) = query.status {
            params.push(format!("status={status}"));
        }
        if let Some(limit) = query.limit {
            params.push(format!("limit={limit}"));
        }
        if let Some(cursor) = &query.cursor {
            params.push(format!("cursor={}", query_value(cursor)));
        }
        let path = if params.is_empty() {
            "/v1/runs".to_owned()
        } else {
            format!("/v1/runs?{}", params.join("&"))
        };
        let raw: Value = self.json(Call::get(path)).await?;
        let mut list: RunList = serde_json::from_value(raw.clone()).map_err(|e| {
            ApiError::new(
                ErrorKind::Protocol,
                format!("could not read the control plane's list of runs: {e}"),
            )
        })?;
        if let Some(raws) = raw.get("runs").and_then(Value::as_array) {
            for (run, raw) in list.runs.iter_mut().zip(raws) {
                run.keep_nulls_from(raw);
            }
        }
        Ok(list)
    }

    async fn stop_run(&self, run: &str) -> Result<Run, ApiError> {
        self.run_json(Call {
            method: Method::POST,
            ..Call::get(format!("/v1/runs/{}/stop", segment(run)))
        })
        .await
    }

    async fn log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        let body = self.open_log(run, offset, follow, self.deadline()).await?;
        Ok(Box::new(HttpLogStream {
            cp: self.clone(),
            run: run.to_owned(),
            follow,
            next_offset: offset,
            decoder: Decoder::new(),
            body: Some(body),
            pending: VecDeque::new(),
            done: false,
            last_progress: Instant::now(),
            reconnects: 0,
        }))
    }

    async fn result(&self, run: &str) -> Result<RunResult, ApiError> {
        self.json(Call::get(format!("/v1/runs/{}/result", segment(run))))
            .await
    }

    async fn telemetry(&self, run: &str, after: u64) -> Result<Telemetry, ApiError> {
        self.json(Call::get(format!(
            "/v1/runs/{}/telemetry?after={after}",
            segment(run)
        )))
        .await
    }

    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError> {
        let body = SetSecret {
            value: value.to_owned(),
        };
        self.json(Call::with_json(
            Method::PUT,
            format!("/v1/secrets/{}", segment(name)),
            &body,
        ))
        .await
    }

    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        #[derive(serde::Deserialize)]
        struct List {
            secrets: Vec<SecretInfo>,
        }
        let list: List = self.json(Call::get("/v1/secrets".to_owned())).await?;
        Ok(list.secrets)
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ApiError> {
        self.empty(Call::delete(format!("/v1/secrets/{}", segment(name))))
            .await
            .map(drop)
    }
}

// ---------------------------------------------------------------------------------------
// The log stream

/// A run's log over HTTP, reconnecting from the last delivered byte when the connection
/// drops.
struct HttpLogStream {
    cp: HttpControlPlane,
    run: String,
    follow: bool,
    /// The offset of the next byte to deliver.
    next_offset: u64,
    decoder: Decoder,
    body: Option<Incoming>,
    pending: VecDeque<LogEvent>,
    done: bool,
    last_progress: Instant,
    /// Reconnections since bytes last arrived.
    reconnects: u32,
}

impl HttpLogStream {
    fn fail(&mut self, kind: ErrorKind, message: String) -> Option<Result<LogEvent, ApiError>> {
        self.done = true;
        self.body = None;
        Some(Err(ApiError::new(kind, message)))
    }

    /// Take every whole frame the decoder holds; whether any was news (new bytes, a beat,
    /// the end).
    fn drain(&mut self) -> Result<bool, ApiError> {
        let mut news = false;
        loop {
            let frame = self.decoder.next_frame().map_err(|e| {
                ApiError::new(
                    ErrorKind::Protocol,
                    format!("the log of `{}` is not well framed: {e}", self.run),
                )
                .with_source(e)
            })?;
            match frame {
                None => return Ok(news),
                Some(Frame::Beat) => news = true,
                Some(Frame::Chunk { offset, data }) => {
                    let end = offset + data.len() as u64;
                    if end <= self.next_offset {
                        continue; // Already delivered.
                    }
                    if offset > self.next_offset {
                        return Err(ApiError::new(
                            ErrorKind::Protocol,
                            format!(
                                "the log of `{}` skipped from byte {} to byte {offset}",
                                self.run, self.next_offset
                            ),
                        ));
                    }
                    let skip = usize::try_from(self.next_offset - offset)
                        .expect("less than the chunk's length");
                    let data = data.slice(skip..);
                    self.pending.push_back(LogEvent::Chunk {
                        offset: self.next_offset,
                        data,
                    });
                    self.next_offset = end;
                    news = true;
                }
                Some(Frame::Tail { offset }) => {
                    self.pending.push_back(LogEvent::Tail { offset });
                    self.done = true;
                    self.body = None;
                    return Ok(true);
                }
                Some(Frame::End(run)) => {
                    self.pending.push_back(LogEvent::End(run));
                    self.done = true;
                    self.body = None;
                    return Ok(true);
                }
            }
        }
    }
}

#[async_trait]
impl LogStream for HttpLogStream {
    async fn next(&mut self) -> Option<Result<LogEvent, ApiError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let until = self.last_progress + self.cp.inner.options.deadline;
            let body = match &mut self.body {
                Some(body) => body,
                None => {
                    if self.reconnects > 0 {
                        let pause = backoff(&self.cp.inner.options, self.reconnects);
                        if Instant::now() + pause >= until {
                            let message = format!(
                                "lost the log of `{}` at byte {} and could not resume it within {}",
                                self.run,
                                self.next_offset,
                                seconds(self.cp.inner.options.deadline)
                            );
                            return self.fail(ErrorKind::Unavailable, message);
                        }
                        tokio::time::sleep(pause).await;
                    }
                    self.reconnects += 1;
                    match self
                        .cp
                        .open_log(&self.run, self.next_offset, self.follow, until)
                        .await
                    {
                        Ok(body) => {
                            self.decoder = Decoder::new();
                            self.body.insert(body)
                        }
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                }
            };
            match tokio::time::timeout_at(until, body.frame()).await {
                Err(_) => {
                    let message = format!(
                        "the log of `{}` received nothing for {} (at byte {})",
                        self.run,
                        seconds(self.cp.inner.options.deadline),
                        self.next_offset
                    );
                    return self.fail(ErrorKind::Unavailable, message);
                }
                Ok(None) | Ok(Some(Err(_))) => {
                    // The connection ended before the stream did: ask again from the last
                    // byte delivered.
                    tracing::debug!(run = %self.run, offset = self.next_offset, "log stream dropped; resuming");
                    self.body = None;
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        self.decoder.push_bytes(data);
                        match self.drain() {
                            // Progress is a whole frame (new bytes, a beat, the end), not
                            // raw bytes: a server cutting every connection mid-header
                            // would otherwise be retried forever.
                            Ok(true) => {
                                self.last_progress = Instant::now();
                                self.reconnects = 0;
                            }
                            Ok(false) => {}
                            Err(e) => {
                                self.done = true;
                                self.body = None;
                                return Some(Err(e));
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Helpers

/// A body reader that refuses past [`MAX_JSON`] bytes.
struct Limited(Incoming);

impl Limited {
    async fn collect(mut self) -> Result<Bytes, String> {
        let mut out = Vec::new();
        while let Some(frame) = self.0.frame().await {
            let frame = frame.map_err(|e| error_chain(&e))?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > MAX_JSON {
                    return Err(format!("the answer is larger than {MAX_JSON} bytes"));
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    }
}

/// The TLS error behind a failed request, if that is what failed. An `io::Error` wrapping
/// another error is looked into with `get_ref` (its `source` skips what it wraps).
fn tls_failure<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        cause = match e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

fn plural_tries(tries: u32) -> String {
    if tries == 1 {
        "1 try".to_owned()
    } else {
        format!("{tries} tries")
    }
}

/// `30s`, `1.5s`.
fn seconds(d: Duration) -> String {
    let tenths = d.as_millis().div_ceil(100);
    if tenths.is_multiple_of(10) {
        format!("{}s", tenths / 10)
    } else {
        format!("{}.{}s", tenths / 10, tenths % 10)
    }
}

/// The pause before try `tries + 1`: exponential, capped, with jitter (half to all of it).
/// Flushes what a read wrote; its byte count.
async fn flush(sink: ByteSink<'_>, path: &str, written: u64) -> Result<u64, ApiError> {
    sink.flush().await.map_err(|e| {
        ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}")).with_source(e)
    })?;
    Ok(written)
}

fn backoff(options: &Options, tries: u32) -> Duration {
    let exp = options
        .initial_backoff
        .saturating_mul(1u32 << tries.saturating_sub(1).min(16));
    let cap = exp.min(options.max_backoff);
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    let half = nanos / 2;
    Duration::from_nanos(half + random() % (nanos - half + 1))
}

/// A cheap pseudo-random number for jitter (splitmix64 over a counter seeded by the clock).
fn random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = STATE
        .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
        .wrapping_add(seed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Percent-encode a path segment: everything but unreserved characters.
fn segment(text: &str) -> String {
    encode(text, b"-._~")
}

/// Percent-encode a query value, keeping `/` readable.
fn query_value(text: &str) -> String {
    encode(text, b"-._~/")
}

fn encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_half_and_whole_of_the_cap() {
        let options = Options {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..Options::default()
        };
        for tries in 1..40 {
            let pause = backoff(&options, tries);
            let cap =
                Duration::from_millis(100 * (1 << (tries - 1).min(16))).min(options.max_backoff);
            assert!(
                pause >= cap / 2 && pause <= cap,
                "{tries}: {pause:?} vs {cap:?}"
            );
        }
    }

    #[test]
    fn encodes_segments_and_queries() {
        assert_eq!(segment("run-k4t9"), "run-k4t9");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(query_value("code/x y"), "code/x%20y");
        assert_eq!(query_value("a&b=c"), "a%26b%3Dc");
    }

    #[test]
    fn seconds_reads_well() {
        assert_eq!(seconds(Duration::from_secs(30)), "30s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5s");
        assert_eq!(seconds(Duration::from_millis(40)), "0.1s");
    }
}
