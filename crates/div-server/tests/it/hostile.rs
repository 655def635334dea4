//! Hostile manifests and uploads: absolute paths, `..`, symlink escapes, hash mismatches and
//! huge counts are refused with clear errors, and nothing is written outside the volume.

use serde_json::{Value, json};

use crate::harness::Server;

const EMPTY: &str = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262";

/// Everything under `dir`, as paths relative to it.
fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(
                p.strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string(),
            );
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

pub(crate) async fn volume_with_empty_blob(server: &Server) {
    let (s, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": "vol"})))
        .await;
    assert!(s == 200 || s == 201, "{v}");
    let (s, v) = server
        .request(
            "PUT",
            &format!("/v1/volumes/vol/blobs/{EMPTY}?offset=0&total=0"),
            None,
        )
        .await;
    assert!(s == 201 || s == 204, "{s} {v}");
}

/// Commits one file at `path` (in a tree at `at`); returns the status and the error message.
pub(crate) async fn commit(server: &Server, at: &str, entries: Value) -> (u16, String) {
    let (status, body) = server
        .request(
            "POST",
            "/v1/volumes/vol/trees",
            Some(json!({"path": at, "entries": entries})),
        )
        .await;
    let message = body["error"]["message"].as_str().unwrap_or("").to_owned();
    (status, message)
}

fn file(path: &str) -> Value {
    json!({"path": path, "kind": "file", "size": 0, "hash": EMPTY})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_tree_paths_are_refused_and_write_nothing_outside() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let outside = server
        .home
        .parent()
        .expect("the home has a parent")
        .to_path_buf();
    let before = listing(&outside);

    async fn check(server: &Server, at: &str, path: &str, expect: &str) {
        let (status, message) = commit(server, at, json!([file(path)])).await;
        assert_eq!(status, 422, "{at} {path}: {message}");
        assert!(
            message.contains(expect),
            "{at} {path}: {message:?} does not say {expect:?}"
        );
    }
    check(&server, "code/a", "/etc/div-pwned", "/etc/div-pwned").await;
    check(&server, "code/a", "../../../div-pwned", "div-pwned").await;
    check(&server, "code/a", "x/../../div-pwned", "div-pwned").await;
    check(&server, "code/a", "./x", "./x").await;
    check(&server, "code/a", "x//y", "x//y").await;
    check(&server, "code/a", "", "").await;
    check(&server, "/abs", "x", "/abs").await;
    check(&server, "../escape", "x", "../escape").await;
    check(&server, "code/../..", "x", "code/../..").await;

    let after = listing(&outside);
    let home = server
        .home
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .to_string();
    let new: Vec<_> = after
        .iter()
        .filter(|p| !before.contains(p) && !p.starts_with(&home))
        .collect();
    assert!(new.is_empty(), "written outside the home: {new:?}");
    assert!(!std::path::Path::new("/etc/div-pwned").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_through_a_symlink_is_refused_and_lands_nowhere() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let outside = tempfile::tempdir().expect("a temp dir");
    let target = outside.path().display().to_string();
    // One tree: a link out of the volume, and a file beneath it.
    let (status, message) = commit(
        &server,
        "code/b",
        json!([
            {"path": "esc", "kind": "symlink", "target": target},
            file("esc/pwned"),
        ]),
    )
    .await;
    assert_eq!(status, 422, "{message}");
    assert!(message.contains("goes through the symlink"), "{message}");
    assert!(
        listing(outside.path()).is_empty(),
        "written through the link"
    );

    // A link alone that leaves the tree, absolute or relative, is refused too.
    for target in [target.as_str(), "../../../.."] {
        let (status, message) = commit(
            &server,
            "code/c",
            json!([{"path": "esc", "kind": "symlink", "target": target}]),
        )
        .await;
        assert_eq!(status, 422, "{message}");
        assert!(message.contains("points outside the tree"), "{message}");
    }
    assert!(
        listing(outside.path()).is_empty(),
        "written through the link"
    );

    // Reading through the link is refused too.
    let (status, _) = server
        .request("GET", "/v1/volumes/vol/file?path=code/c/esc", None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_whose_bytes_do_not_match_its_hash_is_refused_and_not_kept() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let claimed = blake3::hash(b"what was hashed").to_hex().to_string();
    let (status, bytes) = server
        .try_request(
            "PUT",
            &format!("/v1/volumes/vol/blobs/{claimed}?offset=0&total=15"),
            Some(b"what was sent!!".to_vec()),
            &[],
        )
        .await
        .expect("the request went through");
    let body: Value = serde_json::from_slice(&bytes).expect("a JSON error");
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "hash_mismatch");
    insta::assert_snapshot!(
        body["error"]["message"].as_str().unwrap_or("").replace(&claimed, "<claimed>"),
        @"the bytes sent for `<claimed>` hash to `750b1736b7708b2a5bb3cfa85a594582fec18501e65e602009a5ff75562243a9`; the partial upload was discarded"
    );
    let (_, missing) = server
        .request(
            "POST",
            "/v1/volumes/vol/blobs/missing",
            Some(json!({"hashes": [claimed]})),
        )
        .await;
    assert_eq!(missing["missing"], json!([claimed]), "{missing}");
    assert!(
        missing.get("partial").is_none(),
        "the partial was kept: {missing}"
    );

    // More bytes than the total it announced: refused, nothing kept.
    let (status, _) = server
        .try_request(
            "PUT",
            &format!("/v1/volumes/vol/blobs/{claimed}?offset=0&total=3"),
            Some(b"far more than three bytes".to_vec()),
            &[],
        )
        .await
        .expect("the request went through");
    assert_eq!(status, 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_counts_are_answered_or_refused_without_harm() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    // 100k hashes in one question, most of them not hashes at all.
    let hashes: Vec<String> = (0..100_000).map(|i| format!("{i:064x}")).collect();
    let (status, body) = server
        .request(
            "POST",
            "/v1/volumes/vol/blobs/missing",
            Some(json!({ "hashes": hashes })),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["missing"].as_array().map(Vec::len), Some(100_000));
    // A tree of 10k entries, all the same empty file (each is written: more only costs time).
    let entries: Vec<Value> = (0..10_000)
        .map(|i| file(&format!("d{}/f{i}", i % 100)))
        .collect();
    let (status, message) = commit(&server, "code/many", Value::Array(entries)).await;
    assert!(status == 200 || status == 201, "{message}");
    // A body past the server's limit for JSON (64 MiB) is refused before it is all read.
    let huge = vec![b' '; (64 << 20) + (1 << 20)];
    let (status, bytes) = server
        .try_request("POST", "/v1/volumes/vol/blobs/missing", Some(huge), &[])
        .await
        .unwrap_or((413, Default::default()));
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&bytes));
    // The server still answers.
    let (status, _) = server.request("GET", "/v1/health", None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_details_only_when_there_are_some() {
    let server = Server::start().await;
    let (status, body) = server
        .request("PUT", "/v1/volumes/nope/blobs/0?offset=0&total=0", None)
        .await;
    assert_eq!(status, 400);
    assert!(
        body["error"].get("details").is_none(),
        "`details` is an object or absent, never null: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_says_whether_it_holds_a_tree_only_for_its_exact_digest() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let entries = json!([{"path": "a.txt", "kind": "file", "size": 0, "hash": EMPTY}]);
    let (status, body) = server
        .request(
            "POST",
            "/v1/volumes/vol/trees",
            Some(json!({"path": "code/1", "entries": entries})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let digest = body["digest"]
        .as_str()
        .expect("the commit names its digest")
        .to_owned();
    let typed: Vec<div_api::TreeEntry> = serde_json::from_value(entries).expect("entries");
    assert_eq!(digest, div_api::tree_digest(&typed));
    let ask =
        |path: &str, digest: &str| format!("/v1/volumes/vol/trees?path={path}&digest={digest}");
    let (status, held) = server.request("GET", &ask("code/1", &digest), None).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["digest"], digest.as_str());
    assert_eq!(
        (held["files"].as_u64(), held["bytes"].as_u64()),
        (Some(1), Some(0))
    );
    // Another digest, another path, another volume, no path, a path out of the volume.
    for (path, status_wanted) in [
        (ask("code/1", &"0".repeat(64)), 404),
        (ask("code/2", &digest), 404),
        (
            format!("/v1/volumes/none/trees?path=code/1&digest={digest}"),
            404,
        ),
        (format!("/v1/volumes/vol/trees?digest={digest}"), 422),
        (ask("../etc", &digest), 422),
    ] {
        let (status, body) = server.request("GET", &path, None).await;
        assert_eq!(status, status_wanted, "{path}: {body}");
    }
}

/// `POST /v1/volumes/vol/blobs/pack` with `body`: the status and the answer.
pub(crate) async fn pack(server: &Server, volume: &str, body: Vec<u8>) -> (u16, Value) {
    let (status, bytes) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/{volume}/blobs/pack"),
            Some(body),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) fn packed(data: &[u8]) -> div_api::PackBlob {
    div_api::PackBlob {
        hash: blake3::hash(data).to_hex().to_string(),
        data: data.to_vec().into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pack_stores_each_blob_verified_and_a_bad_one_stores_none() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let (a, b) = (packed(b"alpha\n"), packed(&vec![7u8; 300_000]));
    // One blob lies about its bytes: the whole pack is refused, nothing of it kept.
    let mut lying = packed(b"gamma\n");
    lying.data = b"other\n".to_vec().into();
    let (status, body) = pack(&server, "vol", div_api::pack_frame(&[a.clone(), lying])).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "hash_mismatch", "{body}");
    let ask = json!({"hashes": [a.hash, b.hash]});
    let (_, missing) = server
        .request("POST", "/v1/volumes/vol/blobs/missing", Some(ask.clone()))
        .await;
    assert_eq!(
        missing["missing"].as_array().map(Vec::len),
        Some(2),
        "{missing}"
    );
    // A good pack, with one blob twice and one the volume has: stored once each.
    let empty = packed(b"");
    let body = div_api::pack_frame(&[a.clone(), b.clone(), a.clone(), empty]);
    let (status, answer) = pack(&server, "vol", body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, json!({"stored": 2, "held": 2}));
    let (_, missing) = server
        .request("POST", "/v1/volumes/vol/blobs/missing", Some(ask))
        .await;
    assert_eq!(missing["missing"], json!([]), "{missing}");
    // And a tree of them commits and reads back.
    commit_two_and_read_back(&server, "code/p", &a, &b).await;
}

/// Commits `a` and `b` as the files `a` and `b` of a tree at `at` in the volume `vol`, and
/// reads them back from it.
pub(crate) async fn commit_two_and_read_back(
    server: &Server,
    at: &str,
    a: &div_api::PackBlob,
    b: &div_api::PackBlob,
) {
    let (status, message) = commit(
        server,
        at,
        json!([
            {"path": "a", "kind": "file", "size": a.data.len(), "hash": a.hash},
            {"path": "b", "kind": "file", "size": b.data.len(), "hash": b.hash},
        ]),
    )
    .await;
    assert_eq!(status, 201, "{message}");
    let committed = server.home.join("volumes/vol").join(at);
    assert_eq!(std::fs::read(committed.join("a")).expect("a"), a.data);
    assert_eq!(std::fs::read(committed.join("b")).expect("b"), b.data);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pack_that_is_not_one_is_refused_with_what_is_wrong() {
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let h = "a".repeat(64);
    for (body, status_wanted, says) in [
        (
            b"garbage without a header".to_vec(),
            400,
            "has no `HASH LENGTH` line",
        ),
        (
            format!("{h} 10\nshort").into_bytes(),
            400,
            "says 10 bytes, but only 5 follow",
        ),
        (b"XYZ 1\na".to_vec(), 400, "is not a blake3 hash"),
    ] {
        let (status, answer) = pack(&server, "vol", body).await;
        assert_eq!(status, status_wanted, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message}");
    }
    let big = packed(&vec![1u8; (div_api::PACK_BLOB_MAX_BYTES + 1) as usize]);
    let (status, answer) = pack(&server, "vol", div_api::pack_frame(&[big])).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("send a larger one by itself")
    );
    let (status, _) = pack(&server, "none", div_api::pack_frame(&[packed(b"x")])).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_shipped_in_many_snapshots_is_stored_once() {
    use std::os::unix::fs::MetadataExt;
    let server = Server::start().await;
    volume_with_empty_blob(&server).await;
    let big = packed(&vec![42u8; 900_000]);
    let (one, two) = (packed(b"version 1\n"), packed(b"version 2\n"));
    let (status, answer) = pack(
        &server,
        "vol",
        div_api::pack_frame(&[big.clone(), one.clone(), two.clone()]),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    for (at, small) in [("code/1", &one), ("code/2", &two)] {
        let (status, message) = commit(
            &server,
            at,
            json!([
                {"path": "weights.bin", "kind": "file", "size": 900_000, "hash": big.hash},
                {"path": "train.py", "kind": "file", "size": 10, "hash": small.hash},
            ]),
        )
        .await;
        assert_eq!(status, 201, "{message}");
    }
    let volume = server.home.join("volumes/vol");
    let meta = |p: std::path::PathBuf| std::fs::metadata(p).expect("a file");
    let (a, b) = (
        meta(volume.join("code/1/weights.bin")),
        meta(volume.join("code/2/weights.bin")),
    );
    // One file on disk: the blob and both snapshots' copies are the same inode.
    assert_eq!(a.ino(), b.ino());
    assert_eq!(a.nlink(), 3, "the blob and two snapshots");
    assert_eq!(
        std::fs::read(volume.join("code/2/weights.bin"))
            .expect("read")
            .len(),
        900_000
    );
    assert_eq!(
        std::fs::read_to_string(volume.join("code/2/train.py")).expect("read"),
        "version 2\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn packs_of_one_new_blob_sent_at_once_leave_it_whole() {
    let server = std::sync::Arc::new(Server::start().await);
    volume_with_empty_blob(&server).await;
    for round in 0..12u8 {
        let blob = packed(&vec![round; 700_000]);
        let body = div_api::pack_frame(std::slice::from_ref(&blob));
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let (server, body) = (std::sync::Arc::clone(&server), body.clone());
                tokio::spawn(async move { pack(&server, "vol", body).await })
            })
            .collect();
        // While they go, whatever is at the blob's place is whole whenever it is there: a
        // thread of its own looks, again and again, until they are done.
        let place = server.home.join("blobs/vol").join(&blob.hash);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let looking = {
            let done = std::sync::Arc::clone(&done);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(meta) = std::fs::metadata(&place)
                        && meta.len() != 700_000
                    {
                        seen.push(meta.len());
                    }
                }
                seen
            })
        };
        for task in tasks {
            let (status, answer) = task.await.expect("the pack");
            assert_eq!(status, 200, "{answer}");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = looking.join().expect("the looking thread");
        assert!(
            seen.is_empty(),
            "round {round}: a blob seen part-written, of these sizes: {seen:?}"
        );
        let (status, message) = commit(
            &server,
            &format!("code/r{round}"),
            json!([{"path": "w.bin", "kind": "file", "size": 700_000, "hash": blob.hash}]),
        )
        .await;
        assert_eq!(status, 201, "round {round}: {message}");
    }
}

/// The attack on an executable that two snapshots share (one file on disk: the blob's
/// executable twin): a run of the first appends to it, changes its mode and runs it. What it
/// changed is its own; the twin, the second snapshot's file and the first's are as committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_cannot_change_an_executable_other_snapshots_share() {
    use std::os::unix::fs::MetadataExt;
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    volume_with_empty_blob(&server).await;
    let script = packed(b"#!/bin/sh\necho original\n");
    let (status, answer) = pack(
        &server,
        "vol",
        div_api::pack_frame(std::slice::from_ref(&script)),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let entries = json!([{"path": "run.sh", "kind": "file", "size": script.data.len(),
                          "hash": script.hash, "executable": true}]);
    for at in ["code/1", "code/2"] {
        let (status, message) = commit(&server, at, entries.clone()).await;
        assert_eq!(status, 201, "{message}");
    }
    let twin = div_ship::executable_blob(&server.home.join("blobs/vol").join(&script.hash));
    let shared = |at: &str| server.home.join("volumes/vol").join(at).join("run.sh");
    let ino = |p: &std::path::Path| std::fs::metadata(p).expect("there").ino();
    assert_eq!(ino(&shared("code/1")), ino(&twin));
    assert_eq!(ino(&shared("code/2")), ino(&twin));
    let log = server
        .run_to_success(
            "./run.sh; echo 'echo evil' >> run.sh; chmod 600 run.sh; chmod 700 run.sh; ./run.sh",
            json!({"code": {"volume": "vol", "path": "code/1"}}),
        )
        .await;
    assert!(log.contains("original\noriginal\nevil\n"), "{log}");
    for file in [twin.clone(), shared("code/1"), shared("code/2")] {
        let meta = std::fs::metadata(&file).expect("there");
        assert_eq!(
            std::fs::read(&file).expect("read"),
            script.data,
            "{file:?} changed"
        );
        assert_eq!(meta.mode() & 0o777, 0o755, "{file:?}'s mode changed");
        assert_eq!(meta.ino(), ino(&twin));
    }
}
