//! No silent loss of state: a stopped server leaves `state.db` self-contained, and a server
//! never starts on a missing, empty or unreadable `state.db` beside earlier runs and volumes
//! (which would read as "no runs, no secrets"). And the TCP listener's token.

use std::path::Path;

use div_server::{SandboxMode, ServerError, TcpOptions};
use serde_json::json;

use crate::harness::options;

/// Serves `home` until the returned sender is dropped or sent to; the task ends with
/// `serve`'s result.
fn serve(
    home: &Path,
    tcp: Option<TcpOptions>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), ServerError>>,
) {
    let mut opts = options(home, Some("h100:2"), SandboxMode::Auto);
    opts.tcp = tcp;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let home = home.to_owned();
    let task = tokio::spawn(async move {
        unlocked(&home).await;
        div_server::serve(opts, async {
            let _ = rx.await;
        })
        .await
    });
    (tx, task)
}

/// A client of the server serving `home` (its task `task`), once it answers; a server that
/// ended instead is said with its error.
async fn up(
    home: &Path,
    task: &mut tokio::task::JoinHandle<Result<(), ServerError>>,
) -> crate::harness::Server {
    let server = crate::harness::Server::external(home);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !matches!(
        server.try_request("GET", "/v1/health", None, &[]).await,
        Ok((200, _))
    ) {
        if task.is_finished() {
            panic!("the server ended before it answered: {:?}", task.await);
        }
        assert!(std::time::Instant::now() < deadline, "never up");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server
}

/// Waits until no process holds `home`'s lock any more, before a server is started on it:
/// a process this test binary forks for another test's server holds a copy of every
/// descriptor open at that moment, a stopped server's lock among them, until it execs (seen
/// under load: "another div server is already running" right after a clean stop).
async fn unlocked(home: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let free = std::fs::OpenOptions::new()
            .write(true)
            .open(home.join("server.pid"))
            .map_or(true, |f| f.try_lock().is_ok());
        if free || std::time::Instant::now() > deadline {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Why a server started on `home` refused to start (`started`: what it means if it did not).
async fn refusal(home: &Path, started: &str) -> ServerError {
    let (_stop, task) = serve(home, None);
    // A server that starts serves until stopped: give up waiting for its refusal.
    tokio::time::timeout(std::time::Duration::from_secs(30), task)
        .await
        .unwrap_or_else(|_| panic!("{started}"))
        .expect("the server task")
        .expect_err(started)
}

/// A home that has served: a volume, a secret and an ended run, then a clean stop.
async fn used_home(home: &Path) {
    let (stop, mut task) = serve(home, None);
    let server = up(home, &mut task).await;
    let (s, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "kept"})))
        .await;
    assert!(matches!(s, 200 | 201), "{v}");
    let (s, v) = server
        .request(
            "PUT",
            "/v1/secrets/TOKEN",
            Some(json!({"value": "hunter2"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, run) = server.create_run("echo hi", json!({})).await;
    server.wait_end(run["id"].as_str().expect("an id")).await;
    let _ = stop.send(());
    task.await
        .expect("the server task")
        .expect("the server stopped cleanly");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_server_leaves_state_db_self_contained() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    used_home(&home).await;
    let wal = std::fs::metadata(home.join("state.db-wal")).map_or(0, |m| m.len());
    assert_eq!(wal, 0, "the WAL still holds {wal} bytes");
    // state.db alone, copied elsewhere, has everything.
    let alone = dir.path().join("alone.db");
    std::fs::copy(home.join("state.db"), &alone).expect("copy");
    let conn = rusqlite::Connection::open(&alone).expect("the copy opens");
    let volumes: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM volumes WHERE name = 'kept'",
            [],
            |r| r.get(0),
        )
        .expect("volumes");
    let secrets: i64 = conn
        .query_row("SELECT COUNT(*) FROM secrets", [], |r| r.get(0))
        .expect("secrets");
    assert_eq!((volumes, secrets), (1, 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_state_db_beside_runs_and_volumes_refuses_to_start() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    used_home(&home).await;
    let db = home.join("state.db");
    let saved = std::fs::read(&db).expect("state.db");
    for name in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(home.join(name));
    }
    let cases: [(&str, Option<&[u8]>); 3] = [
        ("is missing", None),
        ("is empty", Some(b"")),
        ("could not be read (", Some(&[0x5a; 8192])),
    ];
    for (says, content) in cases {
        match content {
            None => std::fs::remove_file(&db).expect("rm state.db"),
            Some(bytes) => std::fs::write(&db, bytes).expect("write state.db"),
        }
        let err = refusal(
            &home,
            &format!("a server started on a state.db that {says}"),
        )
        .await;
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("the state database `{}` {says}", db.display())),
            "{text}"
        );
        assert!(
            text.contains("but runs/ and volumes/ beside it hold earlier runs and data")
                && text.contains("move runs/ and volumes/ out of the state directory"),
            "{text}"
        );
        // Nothing was made in its place.
        match content {
            None => assert!(!db.exists(), "a fresh state.db was made"),
            Some(bytes) => assert_eq!(std::fs::read(&db).expect("state.db"), bytes),
        }
    }
    // Put back, it starts and has everything.
    std::fs::write(&db, &saved).expect("restore");
    let (stop, mut task) = serve(&home, None);
    let server = up(&home, &mut task).await;
    let (_, list) = server.request("GET", "/v1/secrets", None).await;
    assert_eq!(list["secrets"][0]["name"], "TOKEN", "{list}");
    let _ = stop.send(());
    task.await.expect("the task").expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tcp_listener_answers_only_the_exact_token() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port");
    let token = "s3cret-token-0123456789";
    let (stop, task) = serve(
        &home,
        Some(TcpOptions {
            addr,
            token: token.to_owned(),
        }),
    );
    let ask = |auth: Option<String>| async move {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
                let io = hyper_util::rt::TokioIo::new(stream);
                let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .expect("handshake");
                tokio::spawn(conn);
                let mut req = hyper::Request::builder()
                    .uri("/v1/health")
                    .header("host", "localhost");
                if let Some(a) = &auth {
                    req = req.header("authorization", a);
                }
                let req = req
                    .body(http_body_util::Full::new(bytes::Bytes::new()))
                    .expect("a request");
                return sender.send_request(req).await.expect("an answer").status();
            }
            assert!(std::time::Instant::now() < deadline, "never listening");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    assert_eq!(ask(Some(format!("Bearer {token}"))).await, 200);
    for wrong in [
        None,
        Some("Bearer ".to_owned()),
        Some(format!("Bearer {}", &token[..token.len() - 1])),
        Some(format!("Bearer {token}x")),
        Some(format!("Bearer {}X", &token[..token.len() - 1])),
        Some(format!("Basic {token}")),
    ] {
        assert_eq!(ask(wrong.clone()).await, 401, "{wrong:?}");
    }
    let _ = stop.send(());
    task.await.expect("the task").expect("a clean stop");
}

/// Waits for a server serving `home` to answer, then returns the names of its secrets and
/// stops it.
async fn secrets_of(home: &Path) -> Vec<String> {
    let (stop, mut task) = serve(home, None);
    let server = up(home, &mut task).await;
    let (_, list) = server.request("GET", "/v1/secrets", None).await;
    let _ = stop.send(());
    task.await.expect("the task").expect("a clean stop");
    list["secrets"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| s["name"].as_str().map(str::to_owned))
        .collect()
}

/// A stopped server has closed its database before `serve` returns, whatever still holds a
/// connection to it: here a client that keeps its connection open (HTTP keep-alive) across
/// the stop. Its database used to stay open until that connection ended, after the home was
/// let go; closing it then checkpointed and deleted the `state.db-wal` beside it, by then
/// the next server's (the damaged log of the test below, at random, under load).
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_server_has_closed_its_database_whoever_still_holds_a_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    used_home(&home).await;
    let (stop, mut task) = serve(&home, None);
    up(&home, &mut task).await;
    // A client that asks once and keeps its connection.
    let mut kept = tokio::net::UnixStream::connect(home.join("server.sock"))
        .await
        .expect("a connection");
    kept.write_all(b"GET /v1/secrets HTTP/1.1\r\nhost: div\r\n\r\n")
        .await
        .expect("a request");
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("TOKEN") {
        let mut buf = [0u8; 4096];
        let n = kept.read(&mut buf).await.expect("the answer");
        assert!(
            n > 0,
            "the connection ended: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let _ = stop.send(());
    task.await.expect("the task").expect("a clean stop");
    // Closed: SQLite deletes the log when its last connection closes.
    let wal = home.join("state.db-wal");
    assert!(
        !wal.exists(),
        "the server stopped with its database open (its log is still there)"
    );
    // Whatever comes into the log's place after the stop is left alone when that client
    // lets its connection go.
    let theirs = b"not this server's log".repeat(100);
    std::fs::write(&wal, &theirs).expect("a log");
    drop(kept);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read(&wal).expect("the log is still there"),
        theirs,
        "the stopped server's database touched the log after it stopped"
    );
}

/// Issue 13: a server that was not stopped cleanly leaves changes in `state.db-wal` not yet
/// copied into `state.db`. SQLite silently ignores a log whose header is damaged, and every
/// frame from a damaged one on: started on such a log, the server used to come up without
/// those changes (here, three secrets) and say nothing. Now it refuses, naming the log and
/// the way out; an intact log is read (the secrets are there), and one moved away, as the
/// error says, starts from `state.db` alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_wal_beside_state_db_refuses_to_start() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let home = dir.path().join("home");
    used_home(&home).await;
    let (db, wal) = (home.join("state.db"), home.join("state.db-wal"));
    // Changes left in the log as a crash leaves them: written by a connection that is still
    // open (closing it would copy them into state.db), its files copied meanwhile.
    let (saved_db, saved_wal) = {
        let conn = rusqlite::Connection::open(&db).expect("state.db opens");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no autocheckpoint");
        for name in ["LATE_A", "LATE_B", "LATE_C"] {
            conn.execute(
                "INSERT INTO secrets (name, value, updated_at) VALUES (?1, 'v', '2026-11-30T00:00:00Z')",
                [name],
            )
            .expect("a secret in the log");
        }
        (
            std::fs::read(&db).expect("state.db"),
            std::fs::read(&wal).expect("state.db-wal"),
        )
    };
    assert!(
        saved_wal.len() > 32 + 3 * 24,
        "the log holds frames: {}",
        saved_wal.len()
    );
    let restore = |wal_bytes: Option<&[u8]>| {
        let _ = std::fs::remove_file(home.join("state.db-shm"));
        let _ = std::fs::remove_file(&wal);
        let _ = std::fs::remove_dir(&wal);
        std::fs::write(&db, &saved_db).expect("state.db back");
        if let Some(bytes) = wal_bytes {
            std::fs::write(&wal, bytes).expect("state.db-wal back");
        }
    };
    // The intact log is read: its three secrets are there.
    restore(Some(&saved_wal));
    let names = secrets_of(&home).await;
    assert!(names.iter().any(|n| n == "LATE_C"), "{names:?}");

    let page_size = u32::from_be_bytes(saved_wal[8..12].try_into().expect("4 bytes")) as usize;
    let mut bad_header = saved_wal.clone();
    bad_header[3] ^= 0xff;
    let mut bad_checksum = saved_wal.clone();
    bad_checksum[12] ^= 0x01; // the checkpoint sequence, covered by the header's checksum
    let mut bad_frame = saved_wal.clone();
    bad_frame[32 + 24 + page_size / 2] ^= 0x55; // a byte of the first frame's page
    let cases: [(&str, Option<Vec<u8>>); 5] = [
        (
            "does not start as a SQLite write-ahead log",
            Some(bad_header),
        ),
        ("header's checksum does not match", Some(bad_checksum)),
        ("frame 1 does not check out", Some(bad_frame)),
        (
            "shorter than its 32-byte header",
            Some(saved_wal[..20].to_vec()),
        ),
        ("is not a regular file", None),
    ];
    for (says, bytes) in cases {
        restore(bytes.as_deref());
        if bytes.is_none() {
            std::fs::create_dir(&wal).expect("a folder where the log goes");
        }
        let err = refusal(&home, &format!("a server started on a log that {says}")).await;
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("the write-ahead log `{}`", wal.display()))
                && text.contains(says)
                && text.contains("move state.db-wal and state.db-shm out of the state directory"),
            "{says}: {text}"
        );
        // Refused before SQLite touched it: the log is as it was.
        if let Some(bytes) = &bytes {
            assert_eq!(&std::fs::read(&wal).expect("the log"), bytes, "{says}");
        }
    }
    // The way out the error names: the log moved away, state.db alone starts (without the
    // log's secrets, as the error warned).
    restore(None);
    let names = secrets_of(&home).await;
    assert_eq!(names, ["TOKEN"], "{names:?}");
}
