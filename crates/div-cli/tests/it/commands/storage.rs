//! `div storage`: rm, ls, put (only what the volume lacks, never replacing a folder) and
//! get (never overwriting).

use div_test_support::mock::{error_response, json_response};
use insta::assert_snapshot;
use serde_json::json;

use crate::support::World;

#[tokio::test]
async fn storage_rm_needs_a_terminal_or_yes() {
    let world = World::new().await;
    world
        .mount(
            "DELETE",
            "/v1/volumes/data",
            wiremock::ResponseTemplate::new(204),
        )
        .await;
    let refused = world
        .div_with_stdin(&["storage", "rm", "data"], "y\n")
        .await;
    assert_eq!(refused.code, 200);
    assert_snapshot!(refused.stderr, @r"
    error: removing volume `data` needs a confirmation, and there is no terminal to ask on
    hint: pass `--yes`: `div storage rm data --yes`
    ");
    assert!(world.requests().await.is_empty());
    let done = world.div(&["storage", "rm", "data", "--yes"]).await;
    assert_eq!(
        (done.code, done.stderr.as_str()),
        (0, "volume data removed\n")
    );
    assert_eq!(world.requests().await, ["DELETE /v1/volumes/data"]);
}

#[tokio::test]
async fn storage_ls_lists_volumes_and_what_one_holds() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/volumes",
            json_response(200, &json!({"volumes": [{"name": "data", "created_at": "2025-01-01T00:00:00Z", "size_bytes": 1500}]})),
        )
        .await;
    world
        .mount(
            "GET",
            "/v1/volumes/data/tree",
            json_response(
                200,
                &json!({"entries": [
                    {"path": "train", "kind": "dir"},
                    {"path": "train/a.csv", "kind": "file", "size": 1500},
                    {"path": "train/deep/b.csv", "kind": "file", "size": 500},
                    {"path": "readme.md", "kind": "file", "size": 12}
                ]}),
            ),
        )
        .await;
    let volumes = world.div(&["storage", "ls"]).await;
    assert_eq!(volumes.code, 0, "{}", volumes.stderr);
    assert_snapshot!(volumes.stdout, @r"
    NAME  SIZE    CREATED
    data  1.5 KB  2025-01-01T00:00:00Z
    ");
    let inside = world.div(&["storage", "ls", "data"]).await;
    assert_eq!(inside.code, 0, "{}", inside.stderr);
    assert_snapshot!(inside.stdout, @r"
    12 B    readme.md
    2.0 KB  train/
    ");
    let everything = world.div(&["storage", "ls", "-r", "data"]).await;
    assert_eq!(everything.code, 0, "{}", everything.stderr);
    assert_snapshot!(everything.stdout, @r"
    -       train/
    1.5 KB  train/a.csv
    500 B   train/deep/b.csv
    12 B    readme.md
    ");
    let bad = world.div(&["storage", "ls", "data/../etc"]).await;
    assert_eq!(bad.code, 200);
    assert!(
        bad.stderr
            .starts_with("error: `data/../etc` is not a place in a volume"),
        "{}",
        bad.stderr
    );
}

#[tokio::test]
async fn storage_put_sends_only_what_the_volume_lacks_and_commits_at_the_root() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::write(data.join("a.txt"), "a\n").expect("write");
    std::fs::write(data.join("sub/b.txt"), "bb\n").expect("write");
    let hash_a = blake3::hash(b"a\n").to_hex().to_string();
    let hash_b = blake3::hash(b"bb\n").to_hex().to_string();
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": [hash_b]})),
        )
        .await;
    world
        .mount(
            "PUT",
            &format!("/v1/volumes/ds/blobs/{hash_b}"),
            wiremock::ResponseTemplate::new(201),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 2, "bytes": 5}),
            ),
        )
        .await;
    let done = world
        .div(&["storage", "put", "ds", "data", "--to", "v1"])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @r"
    new volume ds
    2 files, 5 B → ds/v1
    ");
    let puts: Vec<String> = world
        .requests()
        .await
        .into_iter()
        .filter(|r| r.starts_with("PUT"))
        .collect();
    assert_eq!(
        puts,
        [format!("PUT /v1/volumes/ds/blobs/{hash_b}")],
        "only the missing blob is sent"
    );
    let tree = &world.bodies("POST", "/v1/volumes/ds/trees").await[0];
    assert_eq!(tree["path"], "");
    assert_eq!(tree["entries"][0]["path"], "v1/a.txt");
    assert_eq!(tree["entries"][0]["hash"], hash_a.as_str());
    assert_eq!(tree["entries"][1]["path"], "v1/sub/b.txt");
}

#[tokio::test]
async fn storage_put_refuses_to_replace_and_bad_places_reach_nothing() {
    let world = World::new().await;
    std::fs::write(world.project().join("a.txt"), "a\n").expect("write");
    let bad_to = world
        .div(&["storage", "put", "ds", "a.txt", "--to", "../x"])
        .await;
    assert_eq!(bad_to.code, 200, "{}", bad_to.stderr);
    let bad_name = world
        .div(&["storage", "put", "Not A Volume", "a.txt"])
        .await;
    assert_eq!(bad_name.code, 200, "{}", bad_name.stderr);
    let missing = world.div(&["storage", "put", "ds", "nope"]).await;
    assert_eq!(missing.code, 200, "{}", missing.stderr);
    assert!(world.requests().await.is_empty());

    world
        .mount(
            "GET",
            "/v1/volumes",
            json_response(200, &json!({"volumes": []})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes",
            json_response(
                200,
                &json!({"name": "ds", "created_at": "2025-01-01T00:00:00Z"}),
            ),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": []})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            error_response(
                409,
                "conflict",
                "holds something else",
                json!({"path": "a.txt"}),
            ),
        )
        .await;
    let conflict = world.div(&["storage", "put", "ds", "a.txt"]).await;
    assert_eq!(conflict.code, 200);
    assert_snapshot!(conflict.stderr, @r"
    error: `a.txt` in volume `ds` is in the way of the put: holds something else
    hint: put it somewhere new in the volume with `--to DIR`, or into another volume
    ");
}

#[tokio::test]
async fn storage_get_never_overwrites() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/volumes/ds/tree",
            json_response(
                200,
                &json!({"entries": [{"path": "a.txt", "kind": "file", "size": 2}]}),
            ),
        )
        .await;
    world
        .mount(
            "GET",
            "/v1/volumes/ds/file",
            wiremock::ResponseTemplate::new(200).set_body_bytes("a\n"),
        )
        .await;
    let done = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @"ds → out: 1 file, 2 B");
    assert_eq!(
        std::fs::read_to_string(world.project().join("out/a.txt"))
            .ok()
            .as_deref(),
        Some("a\n")
    );
    let again = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(again.code, 200);
    assert_snapshot!(again.stderr, @r"
    error: `[TMP]/very-cool-classifier/out/a.txt` already exists
    hint: get it into a new directory, or move the file away first
    ");
}
