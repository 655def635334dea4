//! A full disk under the control plane's home (a small tmpfs mounted as root): an upload and a
//! run's log that fill it get a clear answer, and nothing is left corrupted. Skipped, with the
//! reason printed, when not root or when the mount fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use div_api::{
    BlobSource, CommitTree, ControlPlane, Endpoint, EntryKind, HttpControlPlane, Options,
    TreeEntry, upload_blob_resuming,
};
use div_server::SandboxMode;
use serde_json::json;

use crate::harness::{Server, options};

/// A tmpfs mounted on a temp dir, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|r| r.split_whitespace().next())
            == Some("0");
        if !root {
            return Err("the tests do not run as root, so no tmpfs can be mounted".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount could not start: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the filesystem of `dir` but for `room` bytes: `room` is set aside first, the rest
/// is filled up to ENOSPC, then `room` is freed. Returns the filler, to free the disk later.
fn fill_but(dir: &Path, room: usize) -> PathBuf {
    use std::io::Write;
    let aside = dir.join("aside");
    std::fs::write(&aside, vec![1u8; room]).expect("room set aside");
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).expect("a filler");
    let chunk = vec![0u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    drop(file);
    std::fs::remove_file(&aside).expect("room freed");
    filler
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_clearly_and_corrupts_nothing() {
    let disk = match Tmpfs::mount("16m") {
        Ok(disk) => disk,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let home = disk.path().join("home");
    let server = Server::at(options(&home, Some("h100:2"), SandboxMode::Auto)).await;
    let endpoint =
        Endpoint::parse(&format!("unix://{}", server.socket().display())).expect("an endpoint");
    let cp = HttpControlPlane::new(endpoint, Options::default()).expect("a client");
    cp.create_volume("full").await.expect("a volume is made");

    // An upload larger than the room left: 507, a clear message, the partial kept short.
    let filler = fill_but(disk.path(), 1 << 20);
    let blob: Vec<u8> = (0..3_000_000_u32).map(|i| (i % 253) as u8).collect();
    let hash = blake3::hash(&blob).to_hex().to_string();
    let source = BlobSource::Bytes(blob.clone().into());
    let err = upload_blob_resuming(&cp, "full", &hash, &source)
        .await
        .expect_err("the upload cannot fit");
    assert_eq!(err.code(), Some("insufficient_storage"), "{err}");
    assert!(
        err.to_string()
            .contains("no space left on the control plane's disk"),
        "{err}"
    );
    let missing = cp
        .missing_blobs("full", std::slice::from_ref(&hash))
        .await
        .expect("the server still answers");
    assert_eq!(
        missing.missing,
        vec![hash.clone()],
        "a partial blob is not whole"
    );
    assert!(missing.partial.get(&hash).copied().unwrap_or(0) < blob.len() as u64);

    // Space freed: the same upload goes on and the tree commits.
    std::fs::remove_file(&filler).expect("the filler goes");
    upload_blob_resuming(&cp, "full", &hash, &source)
        .await
        .expect("the upload succeeds once there is room");
    let tree = CommitTree {
        path: "code/after".into(),
        entries: vec![TreeEntry {
            path: "data.bin".into(),
            kind: EntryKind::File,
            executable: false,
            size: blob.len() as u64,
            hash: Some(hash.clone()),
            target: None,
        }],
    };
    cp.commit_tree("full", &tree)
        .await
        .expect("the tree commits");
    let mut back = Vec::new();
    cp.read_file("full", "code/after/data.bin", &mut back)
        .await
        .expect("the file reads back");
    assert!(
        back == blob,
        "the committed file is the blob, byte for byte"
    );

    // A run whose log fills the disk ends, failed, saying why.
    let filler = fill_but(disk.path(), 1 << 20);
    let (status, run) = server
        .create_run("head -c 4000000 /dev/zero; sleep 30", json!({}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(
        ended["reason"],
        "no space left on the control plane's disk; the run's log could not be written",
        "{ended}"
    );
    std::fs::remove_file(&filler).expect("the filler goes");

    // The state database still opens: a restarted server knows the volume and the run.
    let (home, _) = server.kill().await;
    let server = Server::at(options(&home, Some("h100:2"), SandboxMode::Auto)).await;
    let (status, again) = server.request("GET", &format!("/v1/runs/{id}"), None).await;
    assert_eq!(
        (status, &again["status"]),
        (200, &json!("failed")),
        "{again}"
    );
    let (status, volume) = server.request("GET", "/v1/volumes", None).await;
    assert_eq!(status, 200, "{volume}");
    assert!(volume.to_string().contains("\"full\""), "{volume}");
    drop(server);
}
