//! What `div run` sends of its code: nothing the control plane holds, the whole tree to one
//! that holds none, small files in packs, blobs let go meanwhile sent again.

use div_api::RunStatus;
use div_test_support::mock::{error_response, json_response};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, Request};

use crate::support::{World, run};

#[tokio::test]
async fn unchanged_code_the_control_plane_holds_sends_neither_hashes_nor_tree() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // The control plane holds the tree: it answers the question with the digest asked.
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex("^/v1/volumes/[^/]+/trees$"))
        .respond_with(|req: &Request| {
            let get = |key: &str| {
                req.url
                    .query_pairs()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            json_response(
                200,
                &json!({"volume": "very-cool-classifier-code", "path": get("path"), "files": 1, "bytes": 27, "digest": get("digest")}),
            )
        })
        .mount(&world.server)
        .await;
    let done = world.div(&["run", "--detach", "train.py::run"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /v1/volumes/very-cool-classifier-code/trees")),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.ends_with("/blobs/missing")
            || r.starts_with("POST /v1/volumes/very-cool-classifier-code/trees")),
        "the hashes or the tree were sent: {requests:?}"
    );
    // The placed run names the code at the path asked about.
    let asked = world
        .server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|r| r.method.as_str() == "GET" && r.url.path().ends_with("/trees"))
        .expect("the question");
    let path = asked
        .url
        .query_pairs()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.into_owned())
        .expect("a path");
    assert_eq!(world.placed_body().await["code"]["path"], path.as_str());
}

#[tokio::test]
async fn a_control_plane_that_does_not_hold_the_tree_gets_it_the_whole_way() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // No answer for the question (a 404, as from a control plane that does not know it).
    let done = world.div(&["run", "--detach", "train.py::run"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        requests.iter().any(|r| r.ends_with("/blobs/missing"))
            && requests
                .iter()
                .any(|r| r.starts_with("POST /v1/volumes/very-cool-classifier-code/trees")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn small_files_go_together_in_one_pack_when_the_control_plane_takes_packs() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let mut hashes = Vec::new();
    for i in 0..50 {
        let text = format!("file {i}\n");
        std::fs::write(data.join(format!("f{i}.txt")), &text).expect("write");
        hashes.push(blake3::hash(text.as_bytes()).to_hex().to_string());
    }
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": hashes})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 50, "held": 0})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 50, "bytes": 390}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.starts_with("PUT")),
        "a file went by itself: {requests:?}"
    );
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 1, "{requests:?}");
    let blobs = div_api::parse_pack(&packs[0]).expect("a pack");
    let mut sent: Vec<&str> = blobs.iter().map(|(h, _)| *h).collect();
    sent.sort_unstable();
    let mut wanted: Vec<&str> = hashes.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    assert_eq!(sent, wanted);
    for (hash, bytes) in blobs {
        assert_eq!(blake3::hash(bytes).to_hex().as_str(), hash);
    }
}

/// More small files than one pack carries (4,096) go in two packs, each file in one of
/// them once: the next pack is read while the one before is sent.
#[tokio::test]
async fn small_files_past_one_packs_count_go_in_two_packs_each_once() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let mut hashes = Vec::new();
    for i in 0..4100 {
        let text = format!("file {i}\n");
        std::fs::write(data.join(format!("f{i}.txt")), &text).expect("write");
        hashes.push(blake3::hash(text.as_bytes()).to_hex().to_string());
    }
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": hashes})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 1, "held": 0})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 4100, "bytes": 1}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 2);
    let mut sent: Vec<String> = Vec::new();
    for pack in &packs {
        for (hash, bytes) in div_api::parse_pack(pack).expect("a pack") {
            assert_eq!(blake3::hash(bytes).to_hex().as_str(), hash);
            sent.push(hash.to_owned());
        }
    }
    assert_eq!(sent.len(), 4100, "a file was sent twice or not at all");
    sent.sort_unstable();
    let mut wanted = hashes.clone();
    wanted.sort_unstable();
    assert_eq!(sent, wanted);
}

/// The server's retention of code snapshots can let go a blob between "which blobs do you
/// lack" and the commit: the commit is refused naming it, and the client asks again, sends
/// it and commits, once.
#[tokio::test]
async fn a_commit_refused_for_blobs_let_go_meanwhile_sends_them_again_and_commits() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("a.txt"), "alpha\n").expect("write");
    let hash = blake3::hash(b"alpha\n").to_hex().to_string();
    world.mount_volume_ds_made().await;
    // First asked: the volume holds it. Asked again: it lacks it.
    Mock::given(method("POST"))
        .and(path("/v1/volumes/ds/blobs/missing"))
        .respond_with(json_response(200, &json!({"missing": []})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&world.server)
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": [hash]})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 1, "held": 0})),
        )
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes/ds/trees"))
        .respond_with(error_response(
            422,
            "invalid",
            "1 blob(s) of the tree were not sent",
            json!({"missing": [hash]}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&world.server)
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 1, "bytes": 6}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(
        world
            .bodies("POST", "/v1/volumes/ds/blobs/missing")
            .await
            .len(),
        2
    );
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 1, "sent once, after the refusal");
    let blobs = div_api::parse_pack(&packs[0]).expect("a pack");
    assert_eq!(blobs.len(), 1);
    assert_eq!(blobs[0].0, hash);
    assert_eq!(world.bodies("POST", "/v1/volumes/ds/trees").await.len(), 2);
}
