//! Code snapshots' retention (docs/shipping.md): a project keeps its most recently used
//! snapshots, never one a run still uses, and the blobs only removed snapshots held go with
//! them.

use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::Server;

const VOLUME: &str = "proj-code";

pub(crate) fn hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

async fn start(keep: u64) -> Server {
    let server = Server::start().await;
    std::fs::write(
        server.home.join("settings.json"),
        json!({ "keep_code_snapshots": keep }).to_string(),
    )
    .expect("settings");
    let (s, v) = server
        .request("POST", "/v1/volumes", Some(json!({"name": VOLUME})))
        .await;
    assert!(s == 200 || s == 201, "{v}");
    server
}

/// Sends `files` (path, content) in one pack and commits them at `at`.
async fn snapshot(server: &Server, at: &str, files: &[(&str, &[u8])]) {
    snapshot_with(server, at, files, &[]).await;
}

/// [`snapshot`], the files at `executables` executable.
async fn snapshot_with(server: &Server, at: &str, files: &[(&str, &[u8])], executables: &[&str]) {
    let blobs: Vec<div_api::PackBlob> = files
        .iter()
        .map(|(_, data)| div_api::PackBlob {
            hash: hash(data),
            data: data.to_vec().into(),
        })
        .collect();
    let (status, body) = server
        .try_request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/pack"),
            Some(div_api::pack_frame(&blobs)),
            &[("content-type", "application/octet-stream")],
        )
        .await
        .expect("an answer");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let entries: Vec<Value> = files
        .iter()
        .map(|(path, data)| json!({"path": path, "kind": "file", "size": data.len(), "hash": hash(data), "executable": executables.contains(path)}))
        .collect();
    let (status, v) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/trees"),
            Some(json!({"path": at, "entries": entries})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
}

/// Moves every snapshot's last use a minute back, keeping their order: the rule then counts
/// them, rather than keeping them all as just used.
pub(crate) fn age_snapshots(server: &Server) {
    let db = rusqlite::Connection::open(server.home.join("state.db")).expect("state.db");
    db.busy_timeout(Duration::from_secs(10)).expect("timeout");
    db.execute("UPDATE trees SET used_ms = used_ms - 60000", [])
        .expect("age the trees");
}

fn snapshot_dir(server: &Server, at: &str) -> std::path::PathBuf {
    server.home.join("volumes").join(VOLUME).join(at)
}

fn blob(server: &Server, data: &[u8]) -> std::path::PathBuf {
    server.home.join("blobs").join(VOLUME).join(hash(data))
}

/// The executable twin of the blob of `data`.
fn twin(server: &Server, data: &[u8]) -> std::path::PathBuf {
    div_ship::executable_blob(&blob(server, data))
}

/// Which of `hashes` the server says the volume lacks.
async fn missing(server: &Server, hashes: &[String]) -> Value {
    let (status, missing) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/missing"),
            Some(json!({ "hashes": hashes })),
        )
        .await;
    assert_eq!(status, 200, "{missing}");
    missing["missing"].clone()
}

/// Polls until `done`, or fails after 30 s saying `what`.
pub(crate) async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn held(server: &Server, at: &str, files: &[(&str, &[u8])]) -> u16 {
    let mut entries: Vec<div_api::TreeEntry> = files
        .iter()
        .map(|(path, data)| {
            serde_json::from_value(
                json!({"path": path, "kind": "file", "size": data.len(), "hash": hash(data)}),
            )
            .expect("an entry")
        })
        .collect();
    // The digest is of the tree in path order, as the server keeps it.
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let digest = div_api::tree_digest(&entries);
    server
        .request(
            "GET",
            &format!("/v1/volumes/{VOLUME}/trees?path={at}&digest={digest}"),
            None,
        )
        .await
        .0
}

#[tokio::test(flavor = "multi_thread")]
async fn old_snapshots_go_the_most_recently_used_stay_and_blobs_only_they_held_go_with_them() {
    let server = start(3).await;
    let weights = vec![7u8; 500_000];
    let versions: Vec<Vec<u8>> = (1..=4)
        .map(|i| format!("version {i}\n").into_bytes())
        .collect();
    let files = |i: usize| -> Vec<(&str, &[u8])> {
        vec![
            ("weights.bin", &weights[..]),
            ("train.py", &versions[i][..]),
        ]
    };
    for i in 0..3 {
        snapshot(&server, &format!("code/{i}"), &files(i)).await;
        age_snapshots(&server);
    }
    // code/0 is used again (an unchanged project's next run asks whether it is held): it is
    // now the most recently used of the three.
    assert_eq!(held(&server, "code/0", &files(0)).await, 200);
    age_snapshots(&server);
    // The setting is read at each pass: two kept from now on.
    std::fs::write(
        server.home.join("settings.json"),
        json!({ "keep_code_snapshots": 2 }).to_string(),
    )
    .expect("settings");
    // A fourth: with two kept, code/3 (new) and code/0 (used last) stay; code/1 and code/2 go.
    snapshot(&server, "code/3", &files(3)).await;
    until("code/1 and code/2 removed", || {
        !snapshot_dir(&server, "code/1").exists() && !snapshot_dir(&server, "code/2").exists()
    })
    .await;
    for kept in [0, 3] {
        let dir = snapshot_dir(&server, &format!("code/{kept}"));
        assert_eq!(
            std::fs::read(dir.join("train.py")).expect("kept"),
            versions[kept]
        );
        assert_eq!(
            std::fs::read(dir.join("weights.bin")).expect("kept").len(),
            500_000
        );
    }
    // The blobs only the removed snapshots held are gone, and the server says so: a client
    // asking gets them as missing, and sends them again.
    until("the removed snapshots' own blobs let go", || {
        !blob(&server, &versions[1]).exists() && !blob(&server, &versions[2]).exists()
    })
    .await;
    let (status, missing) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/blobs/missing"),
            Some(json!({"hashes": [hash(&versions[1]), hash(&versions[0]), hash(&weights)]})),
        )
        .await;
    assert_eq!(status, 200, "{missing}");
    assert_eq!(missing["missing"], json!([hash(&versions[1])]), "{missing}");
    // The weights, in every snapshot, are one file: the blob and the two kept snapshots.
    assert_eq!(
        std::fs::metadata(blob(&server, &weights))
            .expect("kept")
            .nlink(),
        3
    );
    assert!(blob(&server, &versions[0]).exists() && blob(&server, &versions[3]).exists());
    // A removed snapshot is no longer held: its project's next run ships it again, whole.
    assert_eq!(held(&server, "code/1", &files(1)).await, 404);
    snapshot(&server, "code/1", &files(1)).await;
    assert_eq!(
        std::fs::read(snapshot_dir(&server, "code/1").join("train.py")).expect("again"),
        versions[1]
    );
    // Nothing a removal used is left in the blob folder, once the pass the last commit
    // started (it removes one more snapshot, after the answer) is over.
    let trash = || -> Vec<String> {
        std::fs::read_dir(server.home.join("blobs").join(VOLUME))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("removed-"))
                    .collect()
            })
            .unwrap_or_default()
    };
    until("no removed snapshot left in the blob folder", || {
        trash().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_a_run_still_uses_is_never_removed() {
    let server = start(1).await;
    snapshot(&server, "code/a", &[("train.py", b"import time\n")]).await;
    let (status, run) = server
        .create_run(
            "sleep 30",
            json!({"project": "proj", "code": {"volume": VOLUME, "path": "code/a"}}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_running(&id).await;
    age_snapshots(&server);
    snapshot(&server, "code/b", &[("train.py", b"b\n")]).await;
    age_snapshots(&server);
    snapshot(&server, "code/c", &[("train.py", b"c\n")]).await;
    // One kept (code/c), and code/a for the run that goes on: only code/b is removed.
    until("code/b removed", || {
        !snapshot_dir(&server, "code/b").exists()
    })
    .await;
    assert_eq!(
        std::fs::read(snapshot_dir(&server, "code/a").join("train.py")).expect("kept"),
        b"import time\n"
    );
    assert!(snapshot_dir(&server, "code/c").join("train.py").exists());
    let (status, _) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert!(status < 300, "stopped");
    server.wait_end(&id).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_a_run_left_on_a_snapshots_way_is_never_followed_when_it_is_removed() {
    let server = start(1).await;
    // Somewhere outside the volume, a folder shaped like a snapshot the server would remove.
    let outside = tempfile::tempdir().expect("a temp dir");
    std::fs::create_dir_all(outside.path().join("1")).expect("mkdir");
    std::fs::write(outside.path().join("1/precious"), "keep me").expect("write");
    snapshot(&server, "code/x/1", &[("train.py", b"1\n")]).await;
    age_snapshots(&server);
    // A run sharing the volume swaps `code/x` for a link to that folder.
    let x = snapshot_dir(&server, "code/x");
    std::fs::remove_dir_all(&x).expect("remove");
    std::os::unix::fs::symlink(outside.path(), &x).expect("symlink");
    snapshot(&server, "code/2", &[("train.py", b"2\n")]).await;
    until("code/x/1 forgotten", || {
        let db = rusqlite::Connection::open(server.home.join("state.db")).expect("state.db");
        let n: i64 = db
            .query_row(
                "SELECT COUNT(*) FROM trees WHERE path = 'code/x/1'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(1);
        n == 0
    })
    .await;
    // The pass that forgot it holds the volume's commit lock until it is done: a commit
    // answered after this point was answered after the pass.
    let (status, v) = server
        .request(
            "POST",
            &format!("/v1/volumes/{VOLUME}/trees"),
            Some(json!({"path": "code/2", "entries": [
                {"path": "train.py", "kind": "file", "size": 2, "hash": hash(b"2\n")}
            ]})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    // Nothing was removed through the link.
    assert_eq!(
        std::fs::read_to_string(outside.path().join("1/precious")).expect("still there"),
        "keep me"
    );
    assert!(snapshot_dir(&server, "code/2").join("train.py").exists());
}

/// An executable file is stored once however many snapshots hold it: a link to its blob's
/// executable twin. The twin goes when no snapshot links it any more, the blob with it when
/// nothing links the blob either; a blob still linked as a plain file stays, its twin alone
/// going.
#[tokio::test(flavor = "multi_thread")]
async fn executables_are_stored_once_and_go_with_the_last_snapshot_that_holds_them() {
    let server = start(1).await;
    let (run, lib) = (vec![b'r'; 300_000], b"echo lib\n".to_vec());
    let first: Vec<(&str, &[u8])> = vec![("run.sh", &run), ("lib.sh", &lib), ("bin/lib", &lib)];
    snapshot_with(&server, "code/0", &first, &["run.sh", "bin/lib"]).await;
    age_snapshots(&server);
    let ino = |p: std::path::PathBuf| std::fs::metadata(p).expect("there").ino();
    let mode = |p: std::path::PathBuf| std::fs::metadata(p).expect("there").mode() & 0o777;
    let tree = snapshot_dir(&server, "code/0");
    assert_eq!(ino(tree.join("run.sh")), ino(twin(&server, &run)));
    assert_eq!(mode(tree.join("run.sh")), 0o755);
    assert_eq!(ino(tree.join("bin/lib")), ino(twin(&server, &lib)));
    assert_eq!(ino(tree.join("lib.sh")), ino(blob(&server, &lib)));
    assert_eq!(mode(tree.join("lib.sh")) & 0o111, 0);
    // The same executable in a second snapshot: still one file, now linked three times.
    snapshot_with(&server, "code/1", &first, &["run.sh", "bin/lib"]).await;
    assert_eq!(
        ino(snapshot_dir(&server, "code/1").join("run.sh")),
        ino(twin(&server, &run))
    );
    // Moved out of the volume first, then deleted: its links are gone once it is deleted.
    until("code/0 removed, its link to the twin with it", || {
        !tree.exists() && std::fs::metadata(twin(&server, &run)).is_ok_and(|m| m.nlink() == 2)
    })
    .await;
    assert_eq!(
        std::fs::read(snapshot_dir(&server, "code/1").join("run.sh")).expect("kept"),
        run,
        "the twin and code/1's run.sh"
    );
    age_snapshots(&server);
    // code/2 holds lib.sh as a plain file only: once code/1 goes, run.sh's blob and twin go
    // (no snapshot links either), lib's twin goes, and lib's blob stays.
    let second: Vec<(&str, &[u8])> = vec![("lib.sh", &lib)];
    snapshot_with(&server, "code/2", &second, &[]).await;
    until("code/1's executables let go", || {
        !snapshot_dir(&server, "code/1").exists()
            && !twin(&server, &run).exists()
            && !blob(&server, &run).exists()
            && !twin(&server, &lib).exists()
    })
    .await;
    assert!(blob(&server, &lib).exists());
    assert_eq!(
        missing(&server, &[hash(&run), hash(&lib)]).await,
        json!([hash(&run)])
    );
    // Shipped again, it is made again, whole and executable.
    age_snapshots(&server);
    snapshot_with(&server, "code/3", &first, &["run.sh", "bin/lib"]).await;
    let tree = snapshot_dir(&server, "code/3");
    assert_eq!(std::fs::read(tree.join("run.sh")).expect("read"), run);
    assert_eq!(mode(tree.join("run.sh")), 0o755);
    assert_eq!(ino(tree.join("bin/lib")), ino(twin(&server, &lib)));
    assert_eq!(ino(tree.join("lib.sh")), ino(blob(&server, &lib)));
}
