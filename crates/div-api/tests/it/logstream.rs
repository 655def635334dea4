//! The log stream across dropped connections: a hand-written HTTP server that cuts each
//! connection after a few bytes; the reader still sees every byte once. The server runs on
//! the test's runtime over a Unix socket and time is tokio's paused clock (see
//! `server.rs`), so deadlines and backoff do not depend on how busy the machine is.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use div_api::logframe;
use div_api::{ControlPlane, Endpoint, HttpControlPlane, LogEvent, RunStatus};
use div_test_support::mock::sample_run;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;

use crate::server::{client_within, read_head};

/// Serve `log` as frames of `chunk` bytes from the asked offset, then `end`; a connection
/// is cut after `cut` bytes of body while more chunk bytes than that remain. Returns its
/// address and the offsets asked.
async fn cutting_server(
    log: Vec<u8>,
    chunk: usize,
    cut: usize,
) -> (Endpoint, tempfile::TempDir, Arc<Mutex<Vec<u64>>>) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let socket = dir.path().join("server.sock");
    let listener = UnixListener::bind(&socket).expect("bind the socket");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&asked);
    tokio::spawn(async move {
        let run = sample_run("run-cut", RunStatus::Succeeded);
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let Some(head) = read_head(&mut socket).await else {
                continue;
            };
            let line = head.line;
            let offset: u64 = line
                .split(['?', '&', ' '])
                .find_map(|p| p.strip_prefix("offset="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            seen.lock().expect("not poisoned").push(offset);
            let mut body = Vec::new();
            let mut at = offset as usize;
            while at < log.len() {
                let end = (at + chunk).min(log.len());
                body.extend_from_slice(&logframe::encode_chunk(at as u64, &log[at..end]));
                at = end;
            }
            // Cut while chunks remain past the cut; a connection with little left ends whole.
            if body.len() > cut {
                body.truncate(cut);
            } else {
                body.extend_from_slice(&logframe::encode_end(&run));
            }
            let header = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {}\r\nconnection: close\r\n\r\n",
                logframe::MEDIA_TYPE
            );
            // The reader may have gone already: nothing to do then.
            if socket.write_all(header.as_bytes()).await.is_ok()
                && socket.write_all(&body).await.is_ok()
            {
                socket.shutdown().await.ok();
            }
        }
    });
    (Endpoint::unix(socket), dir, asked)
}

fn client(endpoint: Endpoint, deadline: Duration) -> HttpControlPlane {
    client_within(endpoint, deadline)
}

#[tokio::test(start_paused = true)]
async fn every_byte_once_across_cut_connections() {
    let log: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
    // 250 body bytes per connection: the cut falls inside a chunk's header or body.
    let (endpoint, _dir, asked) = cutting_server(log.clone(), 100, 250).await;
    let cp = client(endpoint, Duration::from_secs(5));
    let mut stream = cp.log("run-cut", 0, true).await.expect("a stream");
    let mut got = Vec::new();
    let mut ended = None;
    while let Some(event) = stream.next().await {
        match event.expect("no error") {
            LogEvent::Chunk { offset, data } => {
                assert_eq!(offset, got.len() as u64, "no gap, no repeat");
                got.extend_from_slice(&data);
            }
            LogEvent::End(run) => ended = Some(run),
            LogEvent::Tail { .. } => panic!("a followed stream of an ended run does not tail"),
        }
    }
    assert_eq!(got, log);
    assert_eq!(ended.map(|r| r.name), Some("run-cut".to_owned()));
    let asked = asked.lock().expect("not poisoned").clone();
    assert!(asked.len() > 3, "reconnected: {asked:?}");
    assert!(
        asked.windows(2).all(|w| w[0] < w[1]),
        "each reconnect resumes further: {asked:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_progresses_gives_up_at_the_deadline() {
    // Every connection is cut before a whole header arrives.
    let (endpoint, _dir, _) = cutting_server(b"hello".to_vec(), 100, 3).await;
    let cp = client(endpoint, Duration::from_millis(300));
    let mut stream = cp.log("run-cut", 0, true).await.expect("a stream");
    let mut error = None;
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            error = Some(e);
        }
    }
    let e = error.expect("an error ends it");
    assert!(e.is_unavailable(), "{e}");
    assert!(
        e.to_string()
            .starts_with("lost the log of `run-cut` at byte 0"),
        "{e}"
    );
    assert!(
        e.to_string().contains("could not resume it within 300ms"),
        "a sub-second deadline reads in milliseconds: {e}"
    );
}
