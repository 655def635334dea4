//! Typed wiremock helpers: a server per test on `127.0.0.1:0`, a client pointed at it, and
//! mounts for the contract's answers in their real shapes.

use std::time::Duration;

use div_api::logframe;
use div_api::routes::{self, Route};
use div_api::{Catalogue, Endpoint, HttpControlPlane, Options, Run, RunStatus, Token};
use serde::Serialize;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A wiremock server on `127.0.0.1:0`.
pub async fn mock_server() -> MockServer {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").expect("loopback has a free port for a test");
    MockServer::builder().listener(listener).start().await
}

/// Where `server` listens, as an [`Endpoint`].
pub fn endpoint(server: &MockServer) -> Endpoint {
    Endpoint::parse(&server.uri()).expect("wiremock's uri is an http address")
}

/// Options for tests: a short deadline and quick retries.
pub fn test_options(token: Option<&str>) -> Options {
    Options {
        token: token.map(Token::new),
        deadline: Duration::from_secs(5),
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(50),
        ..Options::default()
    }
}

/// A client for `server` with [`test_options`].
pub fn client(server: &MockServer) -> HttpControlPlane {
    HttpControlPlane::new(endpoint(server), test_options(None)).expect("an http client builds")
}

/// A run as a control plane would send it.
pub fn sample_run(name: &str, status: RunStatus) -> Run {
    let ended = status.is_terminal();
    Run {
        id: format!("r_{name}"),
        name: name.to_owned(),
        project: "very-cool-classifier".to_owned(),
        status,
        entrypoint: "train.py::run".to_owned(),
        command: "python -u -c 'from train import run; run()'".to_owned(),
        sku: "h100".to_owned(),
        gpus: 1,
        cores: 8,
        memory_gib: 96,
        cents_per_hour: 495,
        max_spend_cents: Some(1000),
        spent_cents: if ended { 12 } else { 0 },
        image: "default".to_owned(),
        env: Vec::new(),
        checks: Vec::new(),
        verdicts: Vec::new(),
        exit_code: ended.then_some(0),
        reason: None,
        code: None,
        telemetry_layout: None,
        created_at: "2025-01-01T00:00:00Z".to_owned(),
        started_at: Some("2025-01-01T00:00:01Z".to_owned()),
        ended_at: ended.then(|| "2025-01-01T00:01:00Z".to_owned()),
        duration_seconds: if ended { 59 } else { 0 },
        log_bytes: 0,
        model: None,
        placed_by: None,
        extra: Default::default(),
    }
}

/// The stable error body.
pub fn error_body(code: &str, message: &str, details: Value) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if !details.is_null() {
        error["details"] = details;
    }
    json!({ "error": error })
}

/// A response carrying the stable error body.
pub fn error_response(status: u16, code: &str, message: &str, details: Value) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(error_body(code, message, details))
}

/// A JSON response.
pub fn json_response(status: u16, body: &impl Serialize) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(body)
}

/// A log stream body: `chunks` in order from offset 0, then `end` with `run`.
pub fn log_body(chunks: &[&[u8]], run: &Run) -> Vec<u8> {
    let mut body = Vec::new();
    let mut offset = 0u64;
    for chunk in chunks {
        body.extend_from_slice(&logframe::encode_chunk(offset, chunk));
        offset += chunk.len() as u64;
    }
    body.extend_from_slice(&logframe::encode_end(run));
    body
}

/// A response carrying a log stream body.
pub fn log_response(body: Vec<u8>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, logframe::MEDIA_TYPE)
}

/// Mount `GET /v1/catalogue`.
pub async fn mount_catalogue(server: &MockServer, catalogue: &Catalogue) {
    Mock::given(method(Route::Catalogue.method()))
        .and(path(routes::CATALOGUE.path(&[])))
        .respond_with(json_response(200, catalogue))
        .mount(server)
        .await;
}

/// Mount `GET /v1/runs/{id}` and `GET /v1/runs/{name}` for `run`.
pub async fn mount_run(server: &MockServer, run: &Run) {
    for key in [&run.id, &run.name] {
        Mock::given(method(Route::GetRun.method()))
            .and(path(routes::GET_RUN.path(&[key])))
            .respond_with(json_response(200, run))
            .mount(server)
            .await;
    }
}

/// Mount `POST /v1/runs` answering 201 with `run`.
pub async fn mount_create_run(server: &MockServer, run: &Run) {
    Mock::given(method(Route::CreateRun.method()))
        .and(path(routes::CREATE_RUN.path(&[])))
        .respond_with(json_response(201, run))
        .mount(server)
        .await;
}

/// Mount `GET /v1/runs/{run}/log` answering `body` (see [`log_body`]).
pub async fn mount_log(server: &MockServer, run: &str, body: Vec<u8>) {
    Mock::given(method(Route::Log.method()))
        .and(path(routes::LOG.path(&[run])))
        .respond_with(log_response(body))
        .mount(server)
        .await;
}

/// Reads an HTTP request's head (up to and including the blank line, or until the peer
/// stops), for hand-written test servers.
pub async fn read_request_head(socket: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}
