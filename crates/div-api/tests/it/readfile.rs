//! Reading a volume's file across dropped connections: a hand-written HTTP server that
//! announces the whole length and cuts each connection short; the reader asks for the rest
//! with `range` and `if-range` and writes every byte once. The server runs on the test's
//! runtime over a Unix socket and time is tokio's paused clock (see `server.rs`), so
//! deadlines and backoff do not depend on how busy the machine is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use div_api::{ControlPlane, Endpoint, ErrorKind, HttpControlPlane};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;

use crate::server::{client_within, read_head};

/// How the server behaves.
#[derive(Clone, Copy)]
struct Behaviour {
    /// Answer `range: bytes=N-` with 206 from N (else 200 with all of it, as HTTP allows).
    ranges: bool,
    /// Body bytes each connection sends before it is cut (the rest of the file if fewer).
    cut: usize,
    /// From this connection on (counting from 0) the file is another version: another etag.
    changes_at: Option<usize>,
}

/// What each request asked: its `range` and `if-range` headers.
type Asked = Arc<Mutex<Vec<(Option<String>, Option<String>)>>>;

/// The server's address, the directory its socket is in, and what it was asked.
async fn server(file: Vec<u8>, how: Behaviour) -> (Endpoint, tempfile::TempDir, Asked) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let socket = dir.path().join("server.sock");
    let listener = UnixListener::bind(&socket).expect("bind the socket");
    let asked: Asked = Arc::default();
    let seen = Arc::clone(&asked);
    tokio::spawn(async move {
        for connection in 0.. {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let Some(head) = read_head(&mut socket).await else {
                continue;
            };
            let header = |name: &str| head.header(name).map(str::to_owned);
            let (range, if_range) = (header("range"), header("if-range"));
            seen.lock()
                .expect("not poisoned")
                .push((range.clone(), if_range.clone()));
            let etag = if how.changes_at.is_some_and(|c| connection >= c) {
                "\"v2\""
            } else {
                "\"v1\""
            };
            let start = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.strip_suffix('-'))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|_| how.ranges && if_range.as_deref().is_none_or(|t| t == etag));
            let from = start.unwrap_or(0);
            let status = match start {
                Some(_) => format!(
                    "206 Partial Content\r\ncontent-range: bytes {from}-{}/{}",
                    file.len() - 1,
                    file.len()
                ),
                None => "200 OK".to_owned(),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/octet-stream\r\ncontent-length: {}\r\netag: {etag}\r\nconnection: close\r\n\r\n",
                file.len() - from
            );
            let end = (from + how.cut).min(file.len());
            // The reader may have gone already: nothing to do then.
            if socket.write_all(response.as_bytes()).await.is_ok()
                && socket.write_all(&file[from..end]).await.is_ok()
            {
                socket.shutdown().await.ok();
            }
        }
    });
    (Endpoint::unix(socket), dir, asked)
}

fn client(endpoint: Endpoint) -> HttpControlPlane {
    client_within(endpoint, Duration::from_secs(20))
}

fn file(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

#[tokio::test(start_paused = true)]
async fn a_read_cut_every_100_kb_resumes_from_the_last_byte_written() {
    let data = file(1_000_000);
    let (endpoint, _dir, asked) = server(
        data.clone(),
        Behaviour {
            ranges: true,
            cut: 100_000,
            changes_at: None,
        },
    )
    .await;
    let mut out = Vec::new();
    let n = client(endpoint)
        .read_file("data", "big.bin", &mut out)
        .await
        .expect("the read resumes to the end");
    assert_eq!(n, data.len() as u64);
    assert!(out == data, "every byte once, in order");
    let asked = asked.lock().expect("not poisoned").clone();
    let expected: Vec<(Option<String>, Option<String>)> = (0..10)
        .map(|i| {
            if i == 0 {
                (None, None)
            } else {
                (
                    Some(format!("bytes={}-", i * 100_000)),
                    Some("\"v1\"".into()),
                )
            }
        })
        .collect();
    assert_eq!(
        asked, expected,
        "each try asks for exactly the rest of the same version"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_ignores_ranges_never_gets_a_byte_written_twice() {
    let data = file(300_000);
    let (endpoint, _dir, asked) = server(
        data.clone(),
        Behaviour {
            ranges: false,
            cut: 120_000,
            changes_at: None,
        },
    )
    .await;
    let mut out = Vec::new();
    // Each connection sends the first 120 kB again: 120 kB of news, then none. It never
    // gets past 120 kB, so the read gives up at its deadline rather than loop for ever;
    // what it wrote is a prefix of the file, never a byte twice.
    let short = client_within(endpoint, Duration::from_secs(2));
    let read = tokio::time::timeout(
        Duration::from_secs(60),
        short.read_file("data", "big.bin", &mut out),
    )
    .await
    .expect("the read ends by its own deadline");
    let e = read.expect_err("the rest never comes");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("could not resume it"), "{e}");
    assert_eq!(out.len(), 120_000, "the first 120 kB once");
    assert!(out == data[..120_000], "a prefix, in order");
    assert!(asked.lock().expect("not poisoned").len() >= 2);

    // With cuts past what was already written, each 200 carries more: skipped, then kept.
    let (endpoint, _dir2, _) = server(
        data.clone(),
        Behaviour {
            ranges: false,
            cut: usize::MAX,
            changes_at: None,
        },
    )
    .await;
    let mut out = Vec::new();
    client(endpoint)
        .read_file("data", "big.bin", &mut out)
        .await
        .expect("read");
    assert!(out == data);
}

#[tokio::test(start_paused = true)]
async fn a_file_that_changes_between_tries_is_an_error_not_a_mixed_file() {
    let data = file(500_000);
    let (endpoint, _dir, asked) = server(
        data.clone(),
        Behaviour {
            ranges: true,
            cut: 200_000,
            changes_at: Some(1),
        },
    )
    .await;
    let mut out = Vec::new();
    let e = client(endpoint)
        .read_file("data", "big.bin", &mut out)
        .await
        .expect_err("the second version does not continue the first");
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert_eq!(
        e.message(),
        "`big.bin` in volume `data` changed while it was being read (after 200000 bytes); read it again"
    );
    assert!(
        out == data[..200_000],
        "only the first version's bytes were written"
    );
    let asked = asked.lock().expect("not poisoned").clone();
    assert_eq!(
        asked[1],
        (Some("bytes=200000-".into()), Some("\"v1\"".into()))
    );
}
