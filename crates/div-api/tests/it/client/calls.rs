//! Each operation against wiremock: what it sends, the answer it reads, the errors it
//! carries; endpoints as typed.

use bytes::Bytes;
use div_api::*;
use div_test_support::filter_snapshot;
use div_test_support::mock::*;
use serde_json::json;
use wiremock::matchers::{body_json, method, path, query_param};
use wiremock::{Mock, ResponseTemplate};

use super::{client, mount};
use crate::models::examples as ex;

#[tokio::test]
async fn every_json_operation_reads_its_answer() {
    let server = mock_server().await;
    let cp = client(&server);
    let run = ex::run();
    mount(
        &server,
        "GET",
        "/v1/health",
        json_response(200, &ex::health()),
    )
    .await;
    mount_catalogue(&server, &ex::catalogue()).await;
    mount(
        &server,
        "GET",
        "/v1/volumes",
        json_response(200, &json!({"volumes": [ex::volume()]})),
    )
    .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes"))
        .and(body_json(json!({"name": "data"})))
        .respond_with(json_response(201, &ex::volume()))
        .mount(&server)
        .await;
    mount(
        &server,
        "DELETE",
        "/v1/volumes/data",
        ResponseTemplate::new(204),
    )
    .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes/data/blobs/missing"))
        .and(body_json(json!({"hashes": ["ab"]})))
        .respond_with(json_response(200, &ex::missing_blobs()))
        .mount(&server)
        .await;
    mount(
        &server,
        "POST",
        "/v1/volumes/data/trees",
        json_response(201, &ex::committed_tree()),
    )
    .await;
    Mock::given(method("GET"))
        .and(path("/v1/volumes/data/tree"))
        .and(query_param("path", "code/x y"))
        .respond_with(json_response(
            200,
            &json!({"entries": [ex::volume_entry()]}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/runs"))
        .and(query_param("project", "p q"))
        .and(query_param("status", "hit_ceiling"))
        .and(query_param("limit", "2"))
        .and(query_param("cursor", "c1"))
        .and(query_param("placed_by", "al ice"))
        .respond_with(json_response(200, &ex::run_list()))
        .mount(&server)
        .await;
    mount_run(&server, &run).await;
    mount(
        &server,
        "POST",
        &format!("/v1/runs/{}/stop", run.name),
        json_response(200, &run),
    )
    .await;
    mount(
        &server,
        "GET",
        &format!("/v1/runs/{}/result", run.name),
        json_response(200, &ex::run_result()),
    )
    .await;
    Mock::given(method("GET"))
        .and(path(format!("/v1/runs/{}/telemetry", run.name)))
        .and(query_param("after", "4"))
        .respond_with(json_response(200, &ex::telemetry()))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/v1/secrets/HF_TOKEN"))
        .and(body_json(json!({"value": "hunter2"})))
        .respond_with(json_response(200, &ex::secret()))
        .mount(&server)
        .await;
    mount(
        &server,
        "GET",
        "/v1/secrets",
        json_response(200, &json!({"secrets": [ex::secret()]})),
    )
    .await;
    mount(
        &server,
        "DELETE",
        "/v1/secrets/HF_TOKEN",
        ResponseTemplate::new(204),
    )
    .await;

    assert_eq!(cp.health().await.expect("health"), ex::health());
    assert_eq!(cp.catalogue().await.expect("catalogue"), ex::catalogue());
    assert_eq!(
        cp.list_volumes().await.expect("volumes"),
        vec![ex::volume()]
    );
    assert_eq!(
        cp.create_volume("data").await.expect("create"),
        ex::volume()
    );
    cp.delete_volume("data").await.expect("delete");
    assert_eq!(
        cp.missing_blobs("data", &["ab".into()])
            .await
            .expect("missing"),
        ex::missing_blobs()
    );
    assert_eq!(
        cp.commit_tree("data", &ex::commit_tree())
            .await
            .expect("commit"),
        ex::committed_tree()
    );
    assert_eq!(
        cp.list_tree("data", "code/x y").await.expect("tree"),
        vec![ex::volume_entry()]
    );
    let query = ListRuns {
        project: Some("p q".into()),
        status: Some(RunStatus::HitCeiling),
        limit: Some(2),
        cursor: Some("c1".into()),
        placed_by: Some("al ice".into()),
    };
    assert_eq!(cp.list_runs(&query).await.expect("list"), ex::run_list());
    assert_eq!(cp.get_run(&run.id).await.expect("by id"), run);
    assert_eq!(cp.get_run(&run.name).await.expect("by name"), run);
    assert_eq!(cp.stop_run(&run.name).await.expect("stop"), run);
    assert_eq!(
        cp.result(&run.name).await.expect("result"),
        ex::run_result()
    );
    assert_eq!(
        cp.telemetry(&run.name, 4).await.expect("telemetry"),
        ex::telemetry()
    );
    assert_eq!(
        cp.set_secret("HF_TOKEN", "hunter2").await.expect("set"),
        ex::secret()
    );
    assert_eq!(
        cp.list_secrets().await.expect("secrets"),
        vec![ex::secret()]
    );
    cp.delete_secret("HF_TOKEN").await.expect("delete secret");
}

#[tokio::test]
async fn read_file_streams_into_the_sink() {
    let server = mock_server().await;
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    Mock::given(method("GET"))
        .and(path("/v1/volumes/data/file"))
        .and(query_param("path", "code/x/a.bin"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(data.clone(), "application/octet-stream"),
        )
        .mount(&server)
        .await;
    let mut out = Vec::new();
    let n = client(&server)
        .read_file("data", "code/x/a.bin", &mut out)
        .await
        .expect("read");
    assert_eq!(n, data.len() as u64);
    assert_eq!(out, data);
}

#[tokio::test]
async fn errors_carry_the_servers_code_message_and_details() {
    let server = mock_server().await;
    let cp = client(&server);
    mount(
        &server,
        "POST",
        "/v1/runs",
        error_response(
            422,
            "unknown_sku",
            "unknown SKU `z999`",
            json!({"accepted": ["h100", "cpu"]}),
        ),
    )
    .await;
    mount(
        &server,
        "GET",
        "/v1/runs/nope",
        error_response(404, "not_found", "no run `nope`", json!(null)),
    )
    .await;
    mount(
        &server,
        "POST",
        "/v1/volumes/v/trees",
        error_response(
            422,
            "invalid",
            "2 blobs were never sent",
            json!({"missing": ["a", "b"]}),
        ),
    )
    .await;
    mount(
        &server,
        "DELETE",
        "/v1/secrets/X",
        error_response(409, "conflict", "busy", json!(null)),
    )
    .await;
    mount(
        &server,
        "GET",
        "/v1/secrets",
        ResponseTemplate::new(401).set_body_string("no"),
    )
    .await;
    mount(
        &server,
        "GET",
        "/v1/catalogue",
        ResponseTemplate::new(200).set_body_string("{not json"),
    )
    .await;

    let e = cp
        .create_run("k", &ex::create_run())
        .await
        .expect_err("refused");
    assert!(e.is_refused());
    assert_eq!(e.code(), Some("unknown_sku"));
    assert_eq!(e.message(), "unknown SKU `z999`");
    assert_eq!(e.details()["accepted"], json!(["h100", "cpu"]));

    let e = cp.get_run("nope").await.expect_err("not found");
    assert!(e.is_not_found());
    assert_eq!(e.to_string(), "no run `nope`");

    let e = cp
        .commit_tree("v", &ex::commit_tree())
        .await
        .expect_err("invalid");
    assert!(e.is_refused());
    assert_eq!(e.details()["missing"], json!(["a", "b"]));

    assert!(
        cp.delete_secret("X")
            .await
            .expect_err("conflict")
            .is_conflict()
    );

    let e = cp.list_secrets().await.expect_err("unauthorized");
    assert!(e.is_unauthorized());
    insta::assert_snapshot!(filter_snapshot(&e.to_string()), @"the control plane at `http://127.0.0.1:[PORT]` answered `401 Unauthorized`");

    let e = cp.catalogue().await.expect_err("protocol");
    assert!(e.is_protocol());
    insta::assert_snapshot!(e.to_string(), @"could not read the control plane's answer to `GET /v1/catalogue`: key must be a string at line 1 column 2");
}

#[tokio::test]
async fn a_log_stream_from_wiremock_yields_every_byte_then_end() {
    let server = mock_server().await;
    let run = sample_run("run-k4t9", RunStatus::Succeeded);
    mount_log(
        &server,
        "run-k4t9",
        log_body(&[b"hello\n", b"world\n"], &run),
    )
    .await;
    let mut stream = client(&server)
        .log("run-k4t9", 0, true)
        .await
        .expect("a stream");
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push(e.expect("no error"));
    }
    assert_eq!(
        events,
        vec![
            LogEvent::Chunk {
                offset: 0,
                data: Bytes::from_static(b"hello\n")
            },
            LogEvent::Chunk {
                offset: 6,
                data: Bytes::from_static(b"world\n")
            },
            LogEvent::End(Box::new(run)),
        ]
    );
}

#[test]
fn endpoints() {
    fn check(input: &str, expect: &str) {
        let got = match Endpoint::parse(input) {
            Ok(e) => format!("ok {e}"),
            Err(e) => format!("error: {e}"),
        };
        assert_eq!(got, expect, "{input}");
    }
    check("http://127.0.0.1:8080", "ok http://127.0.0.1:8080");
    check("https://api.example.com/", "ok https://api.example.com");
    check(
        "https://api.example.com/base/",
        "ok https://api.example.com/base",
    );
    check(
        "unix:///run/div/server.sock",
        "ok unix:///run/div/server.sock",
    );
    check(
        "unix://relative.sock",
        "error: socket path in `unix://relative.sock` is not absolute: write `unix:///path/to/socket`",
    );
    check(
        "ftp://x",
        "error: control plane address `ftp://x` is not `https://…`, `http://…` or `unix:///path`",
    );
    check(
        "api.example.com",
        "error: control plane address `api.example.com` is not `https://…`, `http://…` or `unix:///path`",
    );
    check(
        "https://",
        "error: control plane address `https://` has no valid host",
    );
    check(
        "https://user:pw@host",
        "error: the control plane address holds credentials (`user@host`); pass the token separately",
    );
    check(
        "https://host/?a=1",
        "error: control plane address `https://host/?a=1` has a query or fragment",
    );
}

/// `node_log` asks for `?node=K`; `log` never sends `node`, so an old server is asked nothing
/// new.
#[tokio::test]
async fn a_nodes_log_is_asked_with_node_and_the_runs_log_without() {
    let server = mock_server().await;
    let run = sample_run("run-k4t9", RunStatus::Succeeded);
    Mock::given(method("GET"))
        .and(path("/v1/runs/run-k4t9/log"))
        .and(query_param("node", "2"))
        .respond_with(log_response(log_body(&[b"rank 2\n"], &run)))
        .mount(&server)
        .await;
    let mut stream = client(&server)
        .node_log("run-k4t9", 2, 0, true)
        .await
        .expect("a stream");
    let first = stream.next().await.expect("an event").expect("no error");
    assert_eq!(
        first,
        LogEvent::Chunk {
            offset: 0,
            data: Bytes::from_static(b"rank 2\n")
        }
    );
    mount_log(&server, "run-k4t9", log_body(&[b"rank 0\n"], &run)).await;
    let mut stream = client(&server)
        .log("run-k4t9", 0, true)
        .await
        .expect("a stream");
    stream.next().await.expect("an event").expect("no error");
    let requests = server.received_requests().await.expect("recording");
    let queries: Vec<_> = requests
        .iter()
        .filter(|r| r.url.path().ends_with("/log"))
        .map(|r| r.url.query().unwrap_or(""))
        .collect();
    assert_eq!(
        queries,
        vec!["offset=0&follow=true&node=2", "offset=0&follow=true"]
    );
}
