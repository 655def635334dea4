//! A scripted HTTP/1.1 server on a Unix socket, run on the test's own runtime.
//!
//! Tests of deadlines and retries run on tokio's paused clock (`start_paused`): time moves
//! only when every task waits on a timer. That is deterministic only when the server's
//! answers are visible the moment they are written, so the server runs on the same runtime
//! and speaks over a Unix socket, where a write is in the reader's queue when `write`
//! returns (loopback TCP may hand the delivery to a kernel thread on a busy machine, and a
//! wiremock server runs on a thread of its own).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use div_api::{Endpoint, HttpControlPlane, Options};
use div_test_support::mock::test_options;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

/// A request as the server saw it: its request line and headers.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    /// `GET /v1/catalogue HTTP/1.1`.
    pub(crate) line: String,
    pub(crate) headers: Vec<(String, String)>,
}

impl Head {
    /// The value of header `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The request's path without its query.
    pub(crate) fn path(&self) -> &str {
        let target = self.line.split(' ').nth(1).unwrap_or("");
        target.split('?').next().unwrap_or("")
    }
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The status line's code and words, like `200 OK`.
    pub(crate) status: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// Wait this long (on the test's clock) before answering.
    pub(crate) delay: Duration,
    /// Send only this many bytes of the body, then close the connection.
    pub(crate) cut: Option<usize>,
}

impl Reply {
    /// `status` with a JSON body.
    pub(crate) fn json(status: &str, body: &impl serde::Serialize) -> Reply {
        Reply {
            status: status.to_owned(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: serde_json::to_vec(body).expect("serializes"),
            delay: Duration::ZERO,
            cut: None,
        }
    }

    /// No answer: the connection is closed once the request has arrived.
    pub(crate) fn hang_up() -> Reply {
        Reply {
            status: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
            delay: Duration::ZERO,
            cut: None,
        }
    }

    /// The contract's error body.
    pub(crate) fn error(status: &str, code: &str, message: &str) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"error": {"code": code, "message": message, "details": null}}),
        )
    }
}

/// A server that answers each request (one per connection) with `answer(request, n)`, `n`
/// counting connections from 0.
pub(crate) struct Server {
    _dir: tempfile::TempDir,
    /// The socket it listens on.
    pub(crate) socket: PathBuf,
    /// Every request so far.
    pub(crate) requests: Arc<Mutex<Vec<Head>>>,
}

impl Server {
    pub(crate) fn start(answer: impl Fn(&Head, usize) -> Reply + Send + 'static) -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let socket = dir.path().join("server.sock");
        let listener = UnixListener::bind(&socket).expect("bind the socket");
        let requests: Arc<Mutex<Vec<Head>>> = Arc::default();
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            for n in 0.. {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let Some(head) = read_head(&mut stream).await else {
                    continue;
                };
                seen.lock().expect("not poisoned").push(head.clone());
                let reply = answer(&head, n);
                tokio::spawn(async move {
                    // No timer at all for an answer without delay: on the paused clock a
                    // timer due in the same millisecond as the client's deadline could let
                    // the deadline win.
                    if !reply.delay.is_zero() {
                        tokio::time::sleep(reply.delay).await;
                    }
                    if reply.status.is_empty() {
                        // Hang up, with `shutdown` rather than by dropping the stream: a drop
                        // closes it only once no other process holds it, and a test that
                        // forks (insta runs `cargo metadata`) may hold it for a while.
                        stream.shutdown().await.ok();
                        return;
                    }
                    let mut out = format!("HTTP/1.1 {}\r\n", reply.status);
                    for (k, v) in &reply.headers {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    if !reply.headers.iter().any(|(k, _)| k == "content-length") {
                        out.push_str(&format!("content-length: {}\r\n", reply.body.len()));
                    }
                    out.push_str("connection: close\r\n\r\n");
                    let body = match reply.cut {
                        Some(cut) => &reply.body[..cut.min(reply.body.len())],
                        None => &reply.body[..],
                    };
                    // The client may have gone (a deadline passed): nothing to do then.
                    if stream.write_all(out.as_bytes()).await.is_ok()
                        && stream.write_all(body).await.is_ok()
                    {
                        stream.shutdown().await.ok();
                    }
                });
            }
        });
        Server {
            _dir: dir,
            socket,
            requests,
        }
    }

    /// Its address, `unix:///…/server.sock`.
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint::unix(&self.socket)
    }

    /// A client with `deadline`, quick retries otherwise.
    pub(crate) fn client(&self, deadline: Duration) -> HttpControlPlane {
        client_within(self.endpoint(), deadline)
    }

    /// How many requests it got.
    pub(crate) fn count(&self) -> usize {
        self.requests.lock().expect("not poisoned").len()
    }
}

/// A client for `endpoint` with `deadline` and [`test_options`]' quick retries.
pub(crate) fn client_within(endpoint: Endpoint, deadline: Duration) -> HttpControlPlane {
    let options = Options {
        deadline,
        ..test_options(None)
    };
    HttpControlPlane::new(endpoint, options).expect("client")
}

/// Read a request's head (and its body, when it says how long it is).
pub(crate) async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> Option<Head> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    };
    let text = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or("").to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    let head = Head { line, headers };
    let length: usize = head
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut have = raw.len() - end;
    while have < length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => have += n,
        }
    }
    Some(head)
}
