//! Staged commits (`volumes::stage`, docs/shipping.md): a tree told to the server first, each
//! new file written once, in its place, by the packs sent for it; the rest linked in at its
//! commit; each blob so written kept by its first file (its home), across code snapshots'
//! retention.

use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::Server;
use crate::retention::{age_snapshots, hash, until};

const VOLUME: &str = "proj-code";

async fn start(keep: u64) -> Server {
    let server = Server::start().await;
    std::fs::write(
        server.home.join("settings.json"),
        json!({ "keep_code_snapshots": keep }).to_string(),
    )
    .expect("settings");
    for volume in [VOLUME, "other-code"] {
        let (s, v) = server
            .request("POST", "/v1/volumes", Some(json!({ "name": volume })))
            .await;
        assert!(s == 200 || s == 201, "{v}");
    }
    server
}

/// A file entry: `path`, its bytes, executable or not.
fn file(path: &str, data: &[u8], executable: bool) -> Value {
    json!({"path": path, "kind": "file", "size": data.len(), "hash": hash(data), "executable": executable})
}

/// Stages `entries` at `at`: the answer's status and body.
async fn stage(server: &Server, volume: &str, at: &str, entries: &[Value]) -> (u16, Value) {
    server
        .request(
            "POST",
            &format!("/v1/volumes/{volume}/stages"),
            Some(json!({ "path": at, "entries": entries })),
        )
        .await
}

/// Sends `blobs` in one pack for the stage `id`: the answer's status and body.
async fn pack(server: &Server, id: &str, blobs: &[&[u8]]) -> (u16, Value) {
    let blobs: Vec<div_api::PackBlob> = blobs
        .iter()
        .map(|data| div_api::PackBlob {
            hash: hash(data),
            data: data.to_vec().into(),
        })
        .collect();
    let (status, body) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/pack?stage={id}"),
            Some(div_api::pack_frame(&blobs)),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn commit(server: &Server, volume: &str, id: &str) -> (u16, Value) {
    server
        .request(
            "POST",
            &format!("/v1/volumes/{volume}/stages/{id}/commit"),
            Some(json!({})),
        )
        .await
}

/// Stages `files` (path, bytes, executable) at `at`, sends what the stage lacks in one pack
/// and commits it.
async fn snapshot(server: &Server, at: &str, files: &[(&str, &[u8], bool)]) {
    let entries: Vec<Value> = files.iter().map(|(p, d, x)| file(p, d, *x)).collect();
    let (status, staged) = stage(server, VOLUME, at, &entries).await;
    assert_eq!(status, 201, "{staged}");
    let missing: Vec<&[u8]> = files
        .iter()
        .filter(|(_, d, _)| {
            staged["missing"]
                .as_array()
                .expect("missing")
                .contains(&json!(hash(d)))
        })
        .map(|(_, d, _)| *d)
        .collect();
    let id = staged["id"].as_str().expect("an id");
    let (status, sent) = pack(server, id, &missing).await;
    assert_eq!(status, 200, "{sent}");
    let (status, committed) = commit(server, VOLUME, id).await;
    assert_eq!(status, 201, "{committed}");
}

fn in_volume(server: &Server, path: &str) -> std::path::PathBuf {
    server.home.join("volumes").join(VOLUME).join(path)
}

fn blob(server: &Server, data: &[u8]) -> std::path::PathBuf {
    server.home.join("blobs").join(VOLUME).join(hash(data))
}

/// The blob's record: whether the volume holds it, and its home.
fn record(server: &Server, data: &[u8]) -> Option<Option<String>> {
    let db = rusqlite::Connection::open(server.home.join("state.db")).expect("state.db");
    db.busy_timeout(Duration::from_secs(10)).expect("timeout");
    rusqlite::OptionalExtension::optional(db.query_row(
        "SELECT home FROM blobs WHERE volume = ?1 AND hash = ?2",
        rusqlite::params![VOLUME, hash(data)],
        |r| r.get(0),
    ))
    .expect("a query")
}

/// What a pack sends for a staged tree is written once, in its place: the tree's plain files
/// with the same bytes are one file, no name is made for it in the blob folder, and its record
/// says where it lives. Blobs the volume held are linked in at the commit; one that only an
/// executable file is, and one too large for a pack, come the other way and are linked too.
#[tokio::test(flavor = "multi_thread")]
async fn a_staged_tree_is_written_where_it_goes_each_new_file_once() {
    let server = start(10).await;
    let old: &[u8] = b"held from before\n";
    // The first tree the other way: its blob lives in the blob folder.
    let blobs = vec![div_api::PackBlob {
        hash: hash(old),
        data: old.to_vec().into(),
    }];
    let (status, _) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/pack"),
            Some(div_api::pack_frame(&blobs)),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    let (status, v) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/trees"),
            Some(json!({"path": "code/0", "entries": [file("old.py", old, false)]})),
        )
        .await;
    assert_eq!(status, 201, "{v}");

    let twice: &[u8] = b"the same bytes in two places\n";
    let run: &[u8] = b"#!/bin/sh\necho run\n";
    let big = vec![3u8; (div_api::PACK_BLOB_MAX_BYTES + 1) as usize];
    let entries = vec![
        file("a/one.py", twice, false),
        file("b/c/two.py", twice, false),
        file("old.py", old, false),
        file("run.sh", run, true),
        file("weights.bin", &big, false),
        json!({"path": "link", "kind": "symlink", "target": "a/one.py"}),
    ];
    let (status, staged) = stage(&server, VOLUME, "code/1", &entries).await;
    assert_eq!(status, 201, "{staged}");
    let mut missing: Vec<String> =
        serde_json::from_value(staged["missing"].clone()).expect("a list");
    missing.sort();
    let mut expected = vec![hash(twice), hash(run), hash(&big)];
    expected.sort();
    assert_eq!(missing, expected, "the blobs the volume lacks, once each");
    let id = staged["id"].as_str().expect("an id").to_owned();
    let (status, sent) = pack(&server, &id, &[twice, run]).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["stored"], 2, "{sent}");
    // The large blob the way large blobs go.
    let (status, _) = server
        .try_request(
            "PUT",
            &format!(
                "/v1/volumes/{VOLUME}/blobs/{}?offset=0&total={}",
                hash(&big),
                big.len()
            ),
            Some(big.clone()),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    assert_eq!(status, 201);
    let (status, committed) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 201, "{committed}");
    assert_eq!(committed["files"], 5, "{committed}");

    let tree = in_volume(&server, "code/1");
    let (one, two) = (
        std::fs::metadata(tree.join("a/one.py")).expect("one"),
        std::fs::metadata(tree.join("b/c/two.py")).expect("two"),
    );
    assert_eq!(std::fs::read(tree.join("a/one.py")).expect("read"), twice);
    assert_eq!(one.ino(), two.ino(), "the same bytes are one file");
    assert_eq!(one.nlink(), 2, "and nothing else links it");
    assert_eq!(one.permissions().mode() & 0o7777, 0o644);
    assert!(!blob(&server, twice).exists(), "no name in the blob folder");
    // Recorded after the answer, where it lives.
    until("the blob written into the tree recorded", || {
        record(&server, twice) == Some(Some("code/1/a/one.py".to_owned()))
    })
    .await;
    // Held from before: the blob folder's file, linked.
    assert_eq!(
        std::fs::metadata(tree.join("old.py")).expect("old").ino(),
        std::fs::metadata(blob(&server, old)).expect("blob").ino()
    );
    // Executable: its bytes, mode 0755, a link to the executable twin in the blob folder.
    let x = std::fs::metadata(tree.join("run.sh")).expect("run.sh");
    assert_eq!(x.permissions().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read(tree.join("run.sh")).expect("read"), run);
    assert_eq!(
        x.ino(),
        std::fs::metadata(div_ship::executable_blob(&blob(&server, run)))
            .expect("twin")
            .ino()
    );
    assert_eq!(std::fs::read(tree.join("weights.bin")).expect("read"), big);
    assert_eq!(
        std::fs::read_link(tree.join("link")).expect("a link"),
        std::path::Path::new("a/one.py")
    );
    // Nothing of the stage is left beside the blobs.
    let left: Vec<String> = std::fs::read_dir(server.home.join("blobs").join(VOLUME))
        .expect("the blob folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("stage-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // A later tree holding the same bytes links to their home: stored once.
    let (status, staged) = stage(
        &server,
        VOLUME,
        "code/2",
        &[
            file("moved/here.py", twice, false),
            file("new.py", b"new\n", false),
        ],
    )
    .await;
    assert_eq!(status, 201, "{staged}");
    assert_eq!(staged["missing"], json!([hash(b"new\n")]), "{staged}");
    let id = staged["id"].as_str().expect("an id").to_owned();
    let (status, _) = pack(&server, &id, &[b"new\n"]).await;
    assert_eq!(status, 200);
    let (status, committed) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 201, "{committed}");
    assert_eq!(
        std::fs::metadata(in_volume(&server, "code/2/moved/here.py"))
            .expect("here")
            .ino(),
        one.ino()
    );
}

/// Retention removing the snapshot a blob lives in keeps the blob, in the blob folder, while
/// another tree links it; when no tree does any more, it goes, record and file.
#[tokio::test(flavor = "multi_thread")]
async fn a_blob_outlives_the_snapshot_it_was_written_in_while_another_links_it() {
    let server = start(1).await;
    let shared: &[u8] = b"in every snapshot\n";
    let first: &[u8] = b"only in the first\n";
    snapshot(
        &server,
        "code/a",
        &[("shared.py", shared, false), ("first.py", first, false)],
    )
    .await;
    until("the blob recorded where it was written", || {
        record(&server, shared) == Some(Some("code/a/shared.py".to_owned()))
    })
    .await;
    age_snapshots(&server);
    snapshot(&server, "code/b", &[("again/shared.py", shared, false)]).await;
    // One kept: code/a goes; its blob that code/b links is kept, in the blob folder.
    until("code/a removed", || !in_volume(&server, "code/a").exists()).await;
    until("the shared blob rehomed", || {
        record(&server, shared) == Some(None)
    })
    .await;
    assert_eq!(
        std::fs::metadata(blob(&server, shared))
            .expect("kept")
            .ino(),
        std::fs::metadata(in_volume(&server, "code/b/again/shared.py"))
            .expect("code/b's")
            .ino()
    );
    assert_eq!(std::fs::read(blob(&server, shared)).expect("read"), shared);
    // The blob only code/a held is gone, record and all.
    until("the first snapshot's own blob let go", || {
        record(&server, first).is_none()
    })
    .await;
    // A third snapshot links the kept blob; code/b going then leaves it linked once more.
    age_snapshots(&server);
    snapshot(&server, "code/c", &[("shared.py", shared, false)]).await;
    until("code/b removed", || !in_volume(&server, "code/b").exists()).await;
    assert_eq!(
        std::fs::read(in_volume(&server, "code/c/shared.py")).expect("read"),
        shared
    );
    assert!(blob(&server, shared).exists());
    // When no tree links it, it goes: code/d holds other bytes, and code/c is removed.
    age_snapshots(&server);
    snapshot(&server, "code/d", &[("other.py", b"other\n", false)]).await;
    until("the shared blob let go", || {
        record(&server, shared).is_none() && !blob(&server, shared).exists()
    })
    .await;
}

/// A pack for a stage is checked against the tree before anything is written: a blob of
/// another size than the tree says refuses the pack, and nothing is written or recorded.
/// A stage is committed once, only in its own volume, and never at the volume's root.
#[tokio::test(flavor = "multi_thread")]
async fn a_stage_takes_only_what_its_tree_says_and_is_committed_once() {
    let server = start(10).await;
    let data: &[u8] = b"twelve bytes";
    let mut lying = file("train.py", data, false);
    lying["size"] = json!(3);
    let (status, staged) = stage(&server, VOLUME, "code/x", &[lying]).await;
    assert_eq!(status, 201, "{staged}");
    let id = staged["id"].as_str().expect("an id").to_owned();
    let (status, refused) = pack(&server, &id, &[data]).await;
    assert_eq!(status, 422, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`train.py` has 3 bytes")),
        "{refused}"
    );
    assert_eq!(record(&server, data), None, "nothing recorded");
    let (status, refused) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 422, "the blob was never sent: {refused}");
    assert_eq!(refused["error"]["details"]["missing"], json!([hash(data)]));
    assert!(!in_volume(&server, "code/x").exists());

    // Committed once; a second commit, or one from another volume, finds no stage.
    let (status, staged) = stage(&server, VOLUME, "code/y", &[file("a.py", data, false)]).await;
    assert_eq!(status, 201, "{staged}");
    let id = staged["id"].as_str().expect("an id").to_owned();
    let (status, _) = commit(&server, "other-code", &id).await;
    assert_eq!(status, 404, "a stage is its own volume's");
    let (status, sent) = pack(&server, &id, &[data]).await;
    assert_eq!(status, 200, "{sent}");
    let (status, committed) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 201, "{committed}");
    let (status, again) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 404, "{again}");
    let (status, late) = pack(&server, &id, &[data]).await;
    assert_eq!(status, 404, "no pack writes into a committed tree: {late}");
    assert_eq!(
        std::fs::read(in_volume(&server, "code/y/a.py")).expect("read"),
        data
    );

    // The volume's root is no stage's, and a tree whose paths leave it is refused whole.
    let (status, refused) = stage(&server, VOLUME, "", &[file("a.py", data, false)]).await;
    assert!(status == 400 || status == 422, "{status} {refused}");
    let (status, refused) =
        stage(&server, VOLUME, "code/z", &[file("../out.py", data, false)]).await;
    assert!(status == 400 || status == 422, "{status} {refused}");
}

/// Sends `data[from..to]` of a blob of `data.len()` bytes: the answer's status.
async fn put_part(server: &Server, data: &[u8], from: usize, to: usize) -> u16 {
    let (status, _) = server
        .try_request(
            "PUT",
            &format!(
                "/v1/volumes/{VOLUME}/blobs/{}?offset={from}&total={}",
                hash(data),
                data.len()
            ),
            Some(data[from..to].to_vec()),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    status
}

/// What an earlier server left on its way in or out is removed when a server starts on its
/// home (`volumes::leftovers`, docs/reliability.md): its stages whatever their age (a stage
/// lives in its server's memory: none can be finished by another), a root put's folder beside
/// the volume's files, and partial uploads not written to for over an hour (the hour put
/// behind them with `filetime`, not waited for). A partial upload written to within the hour
/// is kept and its client goes on from where it was; the client whose stage went with its
/// server is answered 404 for it, and its tree goes the other way. A folder of the volume's
/// own that only looks like one is kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_removes_what_an_earlier_one_left_and_a_client_goes_on() {
    let server = start(10).await;
    let blobs = server.home.join("blobs").join(VOLUME);
    // A stage of this server, left between its packs and its commit.
    let staged_data: &[u8] = b"print('staged')\n";
    let (status, staged) = stage(
        &server,
        VOLUME,
        "code/s",
        &[file("s.py", staged_data, false)],
    )
    .await;
    assert_eq!(status, 201, "{staged}");
    let id = staged["id"].as_str().expect("an id").to_owned();
    let (status, sent) = pack(&server, &id, &[staged_data]).await;
    assert_eq!(status, 200, "{sent}");
    let its_stage = blobs.join(&id);
    assert!(its_stage.is_dir(), "the stage is on disk");
    // An old one from a server long gone, and a put's folder beside the volume's files.
    let old_stage = blobs.join("stage-1-1700000000000-0");
    std::fs::create_dir_all(old_stage.join("src")).expect("mkdir");
    std::fs::write(old_stage.join("src/half.py"), "half wri").expect("write");
    let beside = in_volume(&server, ".tmp-put-1-1700000000000-1");
    std::fs::create_dir_all(beside.join("a")).expect("mkdir");
    let not_ours = in_volume(&server, ".tmp-stage-notes");
    std::fs::create_dir_all(&not_ours).expect("mkdir");
    // Two partial uploads: one idle for two hours, one written to 50 minutes ago.
    let idle: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    let recent: Vec<u8> = (0..6000u32).map(|i| (i % 241) as u8).collect();
    assert_eq!(put_part(&server, &idle, 0, 1000).await, 204);
    assert_eq!(put_part(&server, &recent, 0, 2500).await, 204);
    let partial = |data: &[u8]| blobs.join("partial").join(hash(data));
    let ago = |secs: u64| {
        filetime::FileTime::from_system_time(
            std::time::SystemTime::now() - Duration::from_secs(secs),
        )
    };
    filetime::set_file_mtime(partial(&idle), ago(2 * 3600)).expect("mtime");
    filetime::set_file_mtime(partial(&recent), ago(50 * 60)).expect("mtime");

    let (home, _dir) = server.kill().await;
    let server = Server::at(crate::harness::options(
        &home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
    .await;
    let gone = [&its_stage, &old_stage, &beside, &partial(&idle)];
    until("what the earlier server left is removed", || {
        gone.iter().all(|p| !p.exists())
    })
    .await;
    assert!(not_ours.is_dir(), "a folder of the volume's own is kept");

    // The recent upload goes on from where it was, and the blob is whole.
    let (status, missing) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/missing"),
            Some(json!({ "hashes": [hash(&recent), hash(&idle)] })),
        )
        .await;
    assert_eq!(status, 200, "{missing}");
    let partial_sizes = missing["partial"].as_object().cloned().unwrap_or_default();
    assert_eq!(
        partial_sizes.into_iter().collect::<Vec<_>>(),
        [(hash(&recent), json!(2500))],
        "only the recent upload is partly there: {missing}"
    );
    assert_eq!(put_part(&server, &recent, 2500, recent.len()).await, 201);
    assert_eq!(
        std::fs::read(blob(&server, &recent)).expect("the blob"),
        recent
    );

    // The stage went with its server: its commit is 404, and the tree goes the other way.
    let (status, refused) = commit(&server, VOLUME, &id).await;
    assert_eq!(status, 404, "{refused}");
    let blobs = vec![div_api::PackBlob {
        hash: hash(staged_data),
        data: staged_data.to_vec().into(),
    }];
    let (status, _) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/pack"),
            Some(div_api::pack_frame(&blobs)),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    assert_eq!(status, 200);
    let (status, committed) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/trees"),
            Some(json!({ "path": "code/s", "entries": [file("s.py", staged_data, false)] })),
        )
        .await;
    assert_eq!(status, 201, "{committed}");
    assert_eq!(
        std::fs::read(in_volume(&server, "code/s/s.py")).expect("read"),
        staged_data
    );
}

/// The server keeps sixteen stages: a seventeenth lets the oldest go, its folder with it, and
/// a pack or commit for it then finds no stage; the others are committed as ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_seventeenth_stage_lets_the_oldest_go() {
    let server = start(100).await;
    let data: &[u8] = b"x = 1\n";
    let mut ids = Vec::new();
    for i in 0..17 {
        let (status, staged) = stage(
            &server,
            VOLUME,
            &format!("code/{i}"),
            &[file("a.py", data, false)],
        )
        .await;
        assert_eq!(status, 201, "{staged}");
        ids.push(staged["id"].as_str().expect("an id").to_owned());
    }
    let blobs = server.home.join("blobs").join(VOLUME);
    assert!(
        !blobs.join(&ids[0]).exists(),
        "the oldest stage's folder is gone"
    );
    let (status, gone) = pack(&server, &ids[0], &[data]).await;
    assert_eq!(status, 404, "{gone}");
    let (status, gone) = commit(&server, VOLUME, &ids[0]).await;
    assert_eq!(status, 404, "{gone}");
    let (status, sent) = pack(&server, &ids[16], &[data]).await;
    assert_eq!(status, 200, "{sent}");
    let (status, committed) = commit(&server, VOLUME, &ids[16]).await;
    assert_eq!(status, 201, "{committed}");
    // The second oldest is kept: its pack and commit are taken.
    assert!(blobs.join(&ids[1]).is_dir());
    let (status, sent) = pack(&server, &ids[1], &[data]).await;
    assert_eq!(status, 200, "{sent}");
    let (status, committed) = commit(&server, VOLUME, &ids[1]).await;
    assert_eq!(status, 201, "{committed}");
    assert_eq!(
        std::fs::read(in_volume(&server, "code/1/a.py")).expect("read"),
        data
    );
}
