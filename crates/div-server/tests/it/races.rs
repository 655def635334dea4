//! Many clients at once: uploads of one blob by several clients end with one verified blob.

use std::sync::Arc;

use div_api::{
    BlobSource, ControlPlane, Endpoint, HttpControlPlane, Options, UploadOutcome,
    upload_blob_resuming,
};

use crate::harness::Server;

fn client(server: &Server) -> HttpControlPlane {
    let endpoint =
        Endpoint::parse(&format!("unix://{}", server.socket().display())).expect("an endpoint");
    HttpControlPlane::new(endpoint, Options::default()).expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_of_one_blob_end_verified_and_single() {
    const CLIENTS: usize = 12;
    let server = Server::start().await;
    client(&server)
        .create_volume("race")
        .await
        .expect("a volume is made");
    let blob: Arc<Vec<u8>> = Arc::new((0..2_000_000_u32).map(|i| (i * 7 % 251) as u8).collect());
    let hash = blake3::hash(&blob).to_hex().to_string();
    let total = blob.len() as u64;

    let start = Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (cp, hash, start) = (client(&server), hash.clone(), Arc::clone(&start));
        let source = BlobSource::Bytes(blob.to_vec().into());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            upload_blob_resuming(&cp, "race", &hash, &source).await
        }));
    }
    let mut sent = 0;
    for task in tasks {
        let outcome = task
            .await
            .expect("the upload task ends")
            .expect("every concurrent upload succeeds");
        if matches!(outcome, UploadOutcome::Sent { .. }) {
            sent += 1;
        }
    }
    assert!(sent >= 1, "someone sent the blob");

    let cp = client(&server);
    let missing = cp
        .missing_blobs("race", std::slice::from_ref(&hash))
        .await
        .expect("missing blobs answers");
    assert!(missing.missing.is_empty(), "{missing:?}");
    let (back, _) =
        crate::harness::commit_and_read_back(&cp, "race", "code/raced", &hash, total).await;
    assert!(
        back == *blob,
        "the committed file is the blob, byte for byte"
    );
    // One blob, and no partial left behind.
    let partial = server.home.join("blobs/race/partial").join(&hash);
    assert!(
        !partial.exists(),
        "a partial upload was left at {partial:?}"
    );
}

/// Issue 13: two `div run` in one project at the same instant, each shipping the same new
/// code, commit the same tree at the same `code/<id>`. Both must succeed; one used to fail
/// with "Directory not empty (os error 39)" (the second rename onto the snapshot the first
/// had just made). Twenty pairs, each with new content, each pair released at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commits_of_one_new_tree_both_succeed() {
    const PAIRS: usize = 20;
    const FILES: usize = 24;
    let server = Server::start().await;
    let cp = client(&server);
    cp.create_volume("proj-code")
        .await
        .expect("a volume is made");
    let mut failures = Vec::new();
    for pair in 0..PAIRS {
        let mut entries = Vec::new();
        for file in 0..FILES {
            let content = format!("pair {pair} file {file}\n").repeat(64);
            let hash = blake3::hash(content.as_bytes()).to_hex().to_string();
            let source = BlobSource::Bytes(content.clone().into_bytes().into());
            upload_blob_resuming(&cp, "proj-code", &hash, &source)
                .await
                .expect("the blob uploads");
            entries.push(div_api::TreeEntry {
                path: format!("src/f{file}.py"),
                kind: div_api::EntryKind::File,
                executable: false,
                size: content.len() as u64,
                hash: Some(hash),
                target: None,
            });
        }
        let tree = div_api::CommitTree {
            path: format!("code/{pair:08x}"),
            entries,
        };
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (cp, tree, start) = (client(&server), tree.clone(), Arc::clone(&start));
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                cp.commit_tree("proj-code", &tree).await
            }));
        }
        for task in tasks {
            match task.await.expect("the commit task ends") {
                Ok(committed) => assert_eq!(committed.files, FILES as u64),
                Err(e) => failures.push(format!("pair {pair}: {e}")),
            }
        }
        // Read back before the failures are judged: a commit that failed is named here too.
        let mut back = Vec::new();
        cp.read_file(
            "proj-code",
            &format!("code/{pair:08x}/src/f3.py"),
            &mut back,
        )
        .await
        .unwrap_or_else(|e| {
            panic!("the committed file reads back: {e}; failed commits so far: {failures:#?}")
        });
        assert_eq!(
            back,
            format!("pair {pair} file 3\n").repeat(64).into_bytes()
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {PAIRS} pairs failed: {failures:#?}",
        failures.len()
    );
    // No temporary tree left beside the snapshots.
    let left: Vec<_> = std::fs::read_dir(server.home.join("volumes/proj-code/code"))
        .expect("the code folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
