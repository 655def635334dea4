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
