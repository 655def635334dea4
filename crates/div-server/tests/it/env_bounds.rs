//! Issue 13: a run's environment is bounded where it is set. A variable's or secret's name
//! is at most `MAX_ENV_NAME_BYTES` (255) bytes, and a run's own variables (`--env` and the
//! secrets) at most `MAX_ENV_TOTAL_BYTES` (1 MiB) together: past either, `PUT
//! /v1/secrets/NAME` and `POST /v1/runs` answer 422 saying which bound, and nothing is kept
//! or placed. At the bounds, runs get their variables as any other.

use serde_json::json;

use crate::harness::{HOST_LINE, Server};

#[tokio::test]
async fn a_name_past_255_bytes_is_refused_when_set_and_255_reaches_the_run() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    let long = format!("N{}", "a".repeat(div_spec::MAX_ENV_NAME_BYTES));
    assert_eq!(long.len(), 256);
    let (status, body) = server
        .request(
            "PUT",
            &format!("/v1/secrets/{long}"),
            Some(json!({"value": "v"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "the secret's name is refused: the variable name `{}…` is 256 bytes; a name holds at most 255 bytes",
            &long[..40]
        )
    );
    let (status, body) = server
        .create_run("true", json!({"env": [{"key": long, "value": "v"}]}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "an environment variable is refused: the variable name `{}…` is 256 bytes; a name holds at most 255 bytes",
            &long[..40]
        )
    );
    let (_, list) = server.request("GET", "/v1/secrets", None).await;
    assert_eq!(list["secrets"], json!([]), "a refused secret was kept");
    let (_, runs) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(runs["runs"], json!([]), "a refused run was placed: {runs}");

    // 255 bytes: a name like any other, as a secret and as an `--env`.
    let edge = &long[1..];
    let secret = format!("S{}", &edge[1..]);
    let (status, body) = server
        .request(
            "PUT",
            &format!("/v1/secrets/{secret}"),
            Some(json!({"value": "from the secret"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, run) = server
        .create_run(
            &format!("printenv {edge}; printenv {secret}"),
            json!({"env": [{"key": edge, "value": "from --env"}]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id").to_owned();
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(
        server.log_text(&id).await,
        format!("{HOST_LINE}from --env\nfrom the secret\n")
    );
}

#[tokio::test]
async fn a_runs_variables_past_1_mib_together_are_refused_when_set() {
    let server = Server::start_with(None, div_server::SandboxMode::Bwrap).await;
    // Eight secrets of 130,000 bytes fit (1,040,032 bytes with their names, `=` and NULs);
    // a ninth does not.
    let value = "s".repeat(130_000);
    for i in 1..=8 {
        let (status, body) = server
            .request(
                "PUT",
                &format!("/v1/secrets/S{i}"),
                Some(json!({"value": value})),
            )
            .await;
        assert_eq!(status, 200, "S{i}: {body}");
    }
    let (status, body) = server
        .request("PUT", "/v1/secrets/S9", Some(json!({"value": value})))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the secret `S9` is refused: the secrets hold 1170036 bytes together (`KEY=value` and a NUL each, the largest `S1`); a run's environment holds at most 1048576 bytes (1 MiB); put larger data in a file or a volume; remove a secret with `div secrets rm NAME`"
    );
    let (_, list) = server.request("GET", "/v1/secrets", None).await;
    assert_eq!(
        list["secrets"].as_array().map(Vec::len),
        Some(8),
        "a refused secret was kept: {list}"
    );
    // Replacing one counts it once.
    let (status, body) = server
        .request("PUT", "/v1/secrets/S8", Some(json!({"value": value})))
        .await;
    assert_eq!(status, 200, "{body}");

    // An `--env` that takes the run past 1 MiB with the secrets: refused, nothing placed.
    let (status, body) = server
        .create_run(
            "true",
            json!({"env": [{"key": "MORE", "value": "m".repeat(9_000)}]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "the run's --env variables and the secrets hold 1049038 bytes together (`KEY=value` and a NUL each, the largest `S1`); a run's environment holds at most 1048576 bytes (1 MiB); put larger data in a file or a volume"
    );
    let (_, runs) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(runs["runs"], json!([]), "a refused run was placed: {runs}");

    // An `--env` of a secret's name replaces it, so a smaller one fits: the run gets all.
    let log = server
        .run_to_success(
            "printenv S1; for i in 2 3 4 5 6 7 8; do printenv S$i | wc -c; done",
            json!({"env": [{"key": "S1", "value": "m".repeat(9_000)}]}),
        )
        .await;
    let log = log.strip_prefix(HOST_LINE).expect("the log's first line");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 8, "{}", &log[..log.len().min(200)]);
    assert_eq!(lines[0], "m".repeat(9_000));
    assert!(
        lines[1..].iter().all(|l| l.trim() == "130001"),
        "{:?}",
        &lines[1..]
    );
}
