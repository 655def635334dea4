//! The dashboard: pages for people, served by the local control plane on loopback TCP.
//!
//! The API listens on a Unix socket, which a browser cannot reach. `POST /v1/dashboard` (on
//! that socket, or on the API's own TCP listener with its bearer token) binds a second
//! listener on `127.0.0.1`, on a port the kernel picks, the first time it is asked, and
//! answers a fresh random token and the URL that carries it. That listener serves only the
//! dashboard: its pages, its assets (vendored, nothing from another origin) and a small,
//! read-mostly API of its own, never `/v1` (no secrets, no uploads, no run placement).
//!
//! - **The token.** The URL's `?token=` opens the dashboard once: it is exchanged for a
//!   fresh session token, kept as the cookie `div_dashboard_PORT` (`HttpOnly`,
//!   `SameSite=Strict`, `Path=/`), and the browser is sent on to the same page without it.
//!   Every other request needs the cookie; a wrong or missing one is 401. Tokens are
//!   compared in constant time.
//! - **Loopback only.** The listener binds `127.0.0.1`; a `Host` other than
//!   `127.0.0.1:PORT` or `localhost:PORT` is refused (421), so a page of another site that
//!   rebinds its name to 127.0.0.1 cannot read the dashboard.
//! - **Stop** is a `POST` that needs the cookie (`SameSite=Strict`: another site's request
//!   carries none) and an `Origin` equal to the dashboard's own (403 otherwise).
//! - **Escaping.** The pages are static; what a run provides arrives as JSON and is put in
//!   the page with `textContent`. A `Content-Security-Policy` of `'self'` only, and
//!   `nosniff`, make any markup a run smuggles inert.
//! - **Secrets.** Nothing here reads the secrets' values: the API answers runs, their logs,
//!   results and telemetry only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use div_api::routes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::error::{ErrorCode, HttpError};
use super::wire::{self, Resp, fail, header, param, query};
use crate::members::Actor;
use crate::server::Server;
use headers::{cookie_token, refuse, secure};

mod answer;
mod assets;
mod headers;
mod replay;
pub(crate) mod team;

/// How many links' and sessions' tokens are kept: each `div dashboard` adds a link, each
/// link used a session; the oldest go first.
const MAX_TOKENS: usize = 64;

/// The cookie that carries the token: `div_dashboard_PORT`. Cookies are kept per host, not
/// per port, so two local control planes (two state directories) on 127.0.0.1 would
/// otherwise overwrite each other's.
fn cookie_name(port: u16) -> String {
    format!("div_dashboard_{port}")
}

/// The dashboard's listener and tokens, shared by the API (which opens it) and the
/// listener's connections.
#[derive(Debug, Default)]
pub(crate) struct Dashboard {
    state: Arc<State>,
    listening: tokio::sync::Mutex<Option<Listening>>,
}

#[derive(Debug, Default)]
struct State {
    /// Links' tokens not yet used: each opens the dashboard once.
    links: Mutex<Vec<String>>,
    /// Sessions' tokens, each held as a browser's cookie.
    sessions: Mutex<Vec<String>>,
}

#[derive(Debug)]
struct Listening {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        if let Some(l) = self.listening.get_mut().take() {
            l.task.abort();
        }
    }
}

impl State {
    fn add_link(&self, token: String) {
        keep(&self.links, token);
    }

    fn add_session(&self, token: String) {
        keep(&self.sessions, token);
    }

    /// Whether `given` is a link's token not yet used; using it now.
    fn use_link(&self, given: &str) -> bool {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        match find(&links, given) {
            Some(i) => {
                links.remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether `given` is a session's token.
    fn knows_session(&self, given: &str) -> bool {
        let sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        find(&sessions, given).is_some()
    }

    /// Ends the session whose token is `given`, if there is one.
    fn end_session(&self, given: &str) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = find(&sessions, given) {
            sessions.remove(i);
        }
    }
}

/// Adds `token` to `list`, the oldest going past [`MAX_TOKENS`].
fn keep(list: &Mutex<Vec<String>>, token: String) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if list.len() >= MAX_TOKENS {
        list.remove(0);
    }
    list.push(token);
}

/// Where `given` is in `tokens`: every one compared, each in constant time.
fn find(tokens: &[String], given: &str) -> Option<usize> {
    tokens.iter().enumerate().fold(None, |found, (i, t)| {
        if constant_time_eq(t.as_bytes(), given.as_bytes()) {
            Some(i)
        } else {
            found
        }
    })
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh token: 32 bytes from the kernel's generator, as hex. No fallback: a dashboard
/// without a random token is not opened.
fn fresh_token() -> Result<String, HttpError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| {
            HttpError::internal(format!("could not read /dev/urandom for a token: {e}"))
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `POST /v1/dashboard`: binds the dashboard's loopback listener if it is not yet bound, and
/// answers `{"url", "address"}` with a fresh token in the URL.
pub(crate) async fn open(dashboard: &Dashboard, server: &Arc<Server>) -> Result<Resp, HttpError> {
    let mut listening = dashboard.listening.lock().await;
    let addr = match &*listening {
        Some(l) if !l.task.is_finished() => l.addr,
        _ => {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                .await
                .map_err(|e| {
                    HttpError::internal(format!(
                        "could not listen on 127.0.0.1 for the dashboard: {e}"
                    ))
                })?;
            let addr = listener.local_addr()?;
            let task = tokio::spawn(accept(
                listener,
                addr,
                Arc::clone(&dashboard.state),
                Arc::clone(server),
            ));
            *listening = Some(Listening { addr, task });
            addr
        }
    };
    let token = fresh_token()?;
    dashboard.state.add_link(token.clone());
    let link = DashboardLink {
        url: format!("http://{addr}/?token={token}"),
        address: addr.to_string(),
    };
    Ok(wire::answer(&routes::OPEN_DASHBOARD, 200, &link))
}

async fn accept(
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    state: Arc<State>,
    server: Arc<Server>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, most likely: let some connections end first.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (state, server) = (Arc::clone(&state), Arc::clone(&server));
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let service = hyper::service::service_fn(move |req| {
                let (state, server) = (Arc::clone(&state), Arc::clone(&server));
                async move {
                    Ok::<_, std::convert::Infallible>(secure(
                        serve(&state, &server, addr, req).await,
                    ))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

async fn serve(
    state: &State,
    server: &Arc<Server>,
    addr: SocketAddr,
    req: Request<Incoming>,
) -> Resp {
    let port = addr.port();
    let host_ok = header(&req, "host")
        .is_some_and(|h| h == format!("127.0.0.1:{port}") || h == format!("localhost:{port}"));
    if !host_ok {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            &format!("the dashboard answers only at 127.0.0.1:{port}"),
        );
    }
    // The assets are the same for everyone and hold nothing of any run: the page that asks
    // for the token is styled with them too.
    if req.method() == Method::GET
        && let Some(name) = req.uri().path().strip_prefix("/assets/")
    {
        return assets::asset(name)
            .unwrap_or_else(|| fail(HttpError::not_found(format!("no asset `{name}`"))));
    }
    let q = query(&req);
    // The first load: the URL's token is exchanged for a session's, and the URL loses it.
    let session = cookie_token(&req, &cookie_name(port)).filter(|t| state.knows_session(t));
    if let Some(given) = param(&q, "token") {
        let redirect = Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header("location", same_page(req.uri().path()));
        // A link opens the dashboard once: its token is exchanged for a session's, kept as
        // the cookie, so the link left in the browser's history opens nothing. The same
        // link opened again where the session already is goes on to the page.
        if state.use_link(&given) {
            let session = match fresh_token() {
                Ok(t) => t,
                Err(e) => return fail(e),
            };
            state.add_session(session.clone());
            return redirect
                .header(
                    "set-cookie",
                    format!(
                        "{}={session}; HttpOnly; SameSite=Strict; Path=/",
                        cookie_name(port)
                    ),
                )
                .body(Full::new(Bytes::new()).boxed())
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()));
        }
        if session.is_some() {
            return redirect
                .body(Full::new(Bytes::new()).boxed())
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()));
        }
        return unauthorized(&req);
    }
    let Some(session) = session else {
        return unauthorized(&req);
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let expected = format!("http://127.0.0.1:{port}");
        let expected_localhost = format!("http://localhost:{port}");
        let origin_ok =
            header(&req, "origin").is_some_and(|o| o == expected || o == expected_localhost);
        if !origin_ok {
            return refuse(
                StatusCode::FORBIDDEN,
                "a change needs a request from the dashboard's own page (its `Origin`)",
            );
        }
    }
    // The owner's own dashboard: its sessions are the owner's, an admin's.
    let owner = Actor::owner(format!("dashboard {}", addr.ip()));
    if req.method() == Method::DELETE && req.uri().path() == "/api/session" {
        state.end_session(&session);
        return Response::builder()
            .status(StatusCode::NO_CONTENT)
            .header(
                "set-cookie",
                format!(
                    "{}=; Max-Age=0; HttpOnly; SameSite=Strict; Path=/",
                    cookie_name(port)
                ),
            )
            .body(Full::new(Bytes::new()).boxed())
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()));
    }
    answer::route(server, &owner, req, &q)
        .await
        .unwrap_or_else(fail)
}

/// Where the first load goes on to: the same path, when it is one of this origin's
/// (`//host/…` or a backslash would send the browser elsewhere); else `/`.
fn same_page(path: &str) -> &str {
    if path.starts_with('/') && !path.starts_with("//") && !path.contains('\\') {
        path
    } else {
        "/"
    }
}

fn unauthorized(req: &Request<Incoming>) -> Resp {
    if req.uri().path().starts_with("/api/") {
        return fail(HttpError::new(
            ErrorCode::Unauthorized,
            "the dashboard needs its token: open the URL `div dashboard` prints",
        ));
    }
    // A cookie already held is left as it is: a wrong link another site makes one open
    // must not sign the dashboard out.
    wire::full(401, "text/html; charset=utf-8", assets::UNAUTHORIZED)
}

/// The link [`open_url`] answers: the URL (with its token) and the loopback address.
pub use div_api::DashboardLink;

/// The error returned by [`open_url`].
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error("could not reach the local control plane at `{path}`")]
    Connect {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the local control plane did not answer the dashboard's request")]
    Http(#[source] hyper::Error),
    #[error("the local control plane refused to open the dashboard (HTTP {status}): {body}")]
    Refused { status: u16, body: String },
    #[error("the local control plane's answer was not a dashboard link")]
    Answer(#[source] serde_json::Error),
}

/// Asks the local control plane listening at `socket` to open its dashboard: it binds
/// loopback TCP if it has not yet, and answers a link with a fresh token.
pub async fn open_url(socket: &std::path::Path) -> Result<DashboardLink, DashboardError> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|source| DashboardError::Connect {
            path: socket.to_owned(),
            source,
        })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(DashboardError::Http)?;
    let driver = tokio::spawn(conn);
    let req = Request::builder()
        .method(routes::OPEN_DASHBOARD.method())
        .uri(routes::OPEN_DASHBOARD.path(&[]))
        .header("host", "localhost")
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| DashboardError::Refused {
            status: 0,
            body: e.to_string(),
        })?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(DashboardError::Http)?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(DashboardError::Http)?
        .to_bytes();
    driver.abort();
    if status != 200 {
        return Err(DashboardError::Refused {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    serde_json::from_slice(&body).map_err(DashboardError::Answer)
}

#[cfg(test)]
mod tests {
    use super::answer::{MAX_LOG_READ, ran_in, wanted_range};
    use super::{constant_time_eq, same_page};
    use serde_json::json;

    #[test]
    fn a_run_says_whether_it_ran_in_an_image_or_on_this_machine() {
        let dir = tempfile::tempdir().expect("a dir");
        assert_eq!(
            ran_in(dir.path(), "pytorch/pytorch:2"),
            json!({"host": true, "stands_in_for": "pytorch/pytorch:2"})
        );
        let image = crate::images::RunImage {
            reference: "127.0.0.1:5000/tools/busybox:1".into(),
            digest: "sha256:abc".into(),
            rootfs: dir.path().join("rootfs"),
            env: Vec::new(),
            working_dir: None,
            user: None,
            name_resolution: false,
            source: None,
        };
        std::fs::write(
            dir.path().join(crate::images::RUN_IMAGE_FILE),
            serde_json::to_vec(&image).expect("json"),
        )
        .expect("write");
        assert_eq!(
            ran_in(dir.path(), "127.0.0.1:5000/tools/busybox:1"),
            json!({"image": "127.0.0.1:5000/tools/busybox:1", "digest": "sha256:abc"})
        );
        std::fs::write(dir.path().join(crate::images::RUN_IMAGE_FILE), b"{").expect("write");
        assert!(ran_in(dir.path(), "x")["problem"].is_string());
    }

    #[test]
    fn ranges_are_read_as_asked_and_held_to_the_most_one_read_answers() {
        assert_eq!(wanted_range(Some("bytes=0-9"), 100), Ok((0, 10)));
        assert_eq!(wanted_range(Some("bytes=90-"), 100), Ok((90, 100)));
        assert_eq!(wanted_range(Some("bytes=-10"), 100), Ok((90, 100)));
        assert_eq!(wanted_range(Some("bytes=-1000"), 100), Ok((0, 100)));
        assert_eq!(wanted_range(Some("bytes=50-1000"), 100), Ok((50, 100)));
        assert_eq!(wanted_range(Some("bytes=100-"), 100), Err(()));
        assert_eq!(wanted_range(Some("bytes=0-"), 0), Ok((0, 0)));
        let big = 1 << 30;
        assert_eq!(wanted_range(None, big), Ok((big - MAX_LOG_READ, big)));
        assert_eq!(wanted_range(Some("bytes=0-"), big), Ok((0, MAX_LOG_READ)));
        assert_eq!(wanted_range(Some("bytes=x-y"), 10), Ok((0, 10)));
        assert_eq!(wanted_range(Some("bytes=9-3"), 10), Ok((0, 10)));
    }

    #[test]
    fn the_first_load_goes_on_to_a_page_of_this_origin_only() {
        assert_eq!(same_page("/runs/r_1"), "/runs/r_1");
        assert_eq!(same_page("/"), "/");
        assert_eq!(same_page("//evil.example/x"), "/");
        assert_eq!(same_page("/\\evil.example"), "/");
        assert_eq!(same_page(""), "/");
    }

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
