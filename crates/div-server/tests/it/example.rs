//! The quickstart example, shipped as code to a volume and run with its check, as `div run`
//! would place it.

use bytes::Bytes;
use div_api::{
    BlobSource, CommitTree, ControlPlane, CreateRun, Endpoint, EntryKind, HttpControlPlane,
    LogEvent, Options, RunStatus, TreeEntry,
};

use crate::harness::Server;

#[tokio::test(flavor = "multi_thread")]
async fn the_quickstart_example_runs_and_passes_its_check() {
    let server = Server::start().await;
    let endpoint =
        Endpoint::parse(&format!("unix://{}", server.socket().display())).expect("an endpoint");
    let cp = HttpControlPlane::new(endpoint, Options::default()).expect("a client");
    let source = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/quickstart/train.py"
    ))
    .expect("the example exists");
    let hash = blake3::hash(&source).to_hex().to_string();
    cp.create_volume("quickstart-code").await.expect("a volume");
    let missing = cp
        .missing_blobs("quickstart-code", std::slice::from_ref(&hash))
        .await
        .expect("missing");
    assert_eq!(missing.missing, vec![hash.clone()]);
    let len = source.len() as u64;
    cp.upload_blob(
        "quickstart-code",
        &hash,
        0,
        len,
        BlobSource::Bytes(Bytes::from(source)),
    )
    .await
    .expect("uploaded");
    let tree = CommitTree {
        path: "code/quick1".into(),
        entries: vec![TreeEntry {
            path: "train.py".into(),
            kind: EntryKind::File,
            executable: false,
            size: len,
            hash: Some(hash),
            target: None,
        }],
    };
    cp.commit_tree("quickstart-code", &tree)
        .await
        .expect("committed");
    let request: CreateRun = serde_json::from_value(serde_json::json!({
        "project": "quickstart",
        "entrypoint": "train.py::main",
        "command": "python -u -c 'from train import main; main()'",
        "sku": "cpu",
        "gpus": 0,
        "checks": ["metrics.accuracy>=0.8"],
        "code": {"volume": "quickstart-code", "path": "code/quick1"},
    }))
    .expect("a run request");
    let run = cp
        .create_run("quickstart-1", &request)
        .await
        .expect("placed");
    let mut log = cp.log(&run.id, 0, true).await.expect("a log stream");
    let mut text = Vec::new();
    let mut ended = None;
    while let Some(event) = log.next().await {
        match event.expect("the stream goes on") {
            LogEvent::Chunk { data, .. } => text.extend_from_slice(&data),
            LogEvent::End(run) => ended = Some(run),
            _ => {}
        }
    }
    let ended = ended.expect("the stream ended with the run");
    let text = String::from_utf8_lossy(&text);
    assert_eq!(ended.status, RunStatus::Succeeded, "{text}");
    assert!(text.contains("step 300"), "{text}");
    assert!(
        text.contains("check passed: metrics.accuracy >= 0.8 (found 0.9"),
        "{text}"
    );
    let telemetry = cp.telemetry(&run.id, 0).await.expect("telemetry");
    assert_eq!(telemetry.points.len(), 12);
    // The volume's copy of the code is never modified, and the run's copy is gone.
    let entries = cp
        .list_tree("quickstart-code", "")
        .await
        .expect("a listing");
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["code", "code/quick1", "code/quick1/train.py"]);
    // The run's places are let go just after its end is recorded.
    let workspace = server.home.join("runs").join(&run.id).join("workspace");
    crate::retention::until("the run's workspace let go", || !workspace.exists()).await;
}
