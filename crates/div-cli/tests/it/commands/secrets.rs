//! `div secrets`: values from stdin (never argv), refusals, the list and removal.

use div_test_support::mock::{error_response, json_response};
use insta::assert_snapshot;
use serde_json::json;

use crate::support::World;

#[tokio::test]
async fn secrets_set_reads_stdin_never_argv() {
    let world = World::new().await;
    world
        .mount(
            "PUT",
            "/v1/secrets/HF_TOKEN",
            json_response(
                200,
                &json!({"name": "HF_TOKEN", "updated_at": "2025-01-01T00:00:00Z"}),
            ),
        )
        .await;
    let done = world
        .div_with_stdin(&["secrets", "set", "HF_TOKEN"], "hunter2\n")
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @"secret HF_TOKEN set; every run placed from now on has it (an --env of the same name wins)");
    assert_eq!(
        world.bodies("PUT", "/v1/secrets/HF_TOKEN").await,
        [json!({"value": "hunter2"})]
    );

    let file = world.project().join("key.json");
    std::fs::write(&file, "{\"k\": 1}\n").expect("write");
    let from_file = world
        .div(&["secrets", "set", "HF_TOKEN", "--from-file", "key.json"])
        .await;
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    assert_eq!(
        world.bodies("PUT", "/v1/secrets/HF_TOKEN").await[1],
        json!({"value": "{\"k\": 1}\n"}),
        "a file is sent as it is"
    );
}

#[tokio::test]
async fn secrets_refuse_a_value_in_argv_an_empty_value_and_a_bad_name() {
    let world = World::new().await;
    let argv = world.div(&["secrets", "set", "HF_TOKEN", "hunter2"]).await;
    assert_eq!(argv.code, 200);
    assert!(
        argv.stderr.contains("unexpected argument 'hunter2'"),
        "{}",
        argv.stderr
    );
    assert!(
        !argv
            .stderr
            .contains("Usage: div secrets set [OPTIONS] <NAME> <VALUE>")
    );
    let empty = world
        .div_with_stdin(&["secrets", "set", "HF_TOKEN"], "")
        .await;
    assert_eq!(empty.code, 200);
    assert!(
        empty.stderr.starts_with("error: the value is empty\n"),
        "{}",
        empty.stderr
    );
    let bad = world
        .div_with_stdin(&["secrets", "set", "HF-TOKEN"], "x")
        .await;
    assert_eq!(bad.code, 200);
    assert_snapshot!(bad.stderr, @"error: `HF-TOKEN` is not a secret name: use letters, digits and `_`, not starting with a digit");
    assert!(world.requests().await.is_empty());
}

#[tokio::test]
async fn secrets_ls_shows_names_and_dates_and_rm_removes() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/secrets",
            json_response(
                200,
                &json!({"secrets": [{"name": "HF_TOKEN", "updated_at": "2025-01-01T00:00:00Z"}]}),
            ),
        )
        .await;
    world
        .mount(
            "DELETE",
            "/v1/secrets/HF_TOKEN",
            wiremock::ResponseTemplate::new(204),
        )
        .await;
    world
        .mount(
            "DELETE",
            "/v1/secrets/NOPE",
            error_response(404, "not_found", "no secret", json!(null)),
        )
        .await;
    let ls = world.div(&["secrets", "ls"]).await;
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert_snapshot!(ls.stdout, @r"
    NAME      UPDATED
    HF_TOKEN  2025-01-01T00:00:00Z
    ");
    let rm = world.div(&["secrets", "rm", "HF_TOKEN"]).await;
    assert_eq!(
        (rm.code, rm.stderr.as_str()),
        (0, "secret HF_TOKEN removed\n")
    );
    let missing = world.div(&["secrets", "rm", "NOPE"]).await;
    assert_eq!(missing.code, 200);
    assert_snapshot!(missing.stderr, @r"
    error: there is no secret `NOPE`
    hint: `div secrets ls` lists them
    ");
}
