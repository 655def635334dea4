//! The HTTP client against wiremock: every operation's happy path, errors with details,
//! retries, and the token kept out of every message. Deadlines and retries until a deadline
//! are tested against `server.rs`'s server on tokio's paused clock.

use std::time::Duration;

use bytes::Bytes;
use div_api::*;
use div_test_support::filter_snapshot;
use div_test_support::mock::*;
use serde_json::json;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::models::examples as ex;
use crate::server::{Reply, Server};

/// A client for `server` whose deadline no busy machine reaches: a wiremock server runs on
/// a thread of its own, so these tests cannot use the paused clock.
fn client(server: &MockServer) -> HttpControlPlane {
    let options = Options {
        deadline: Duration::from_secs(600),
        ..test_options(None)
    };
    HttpControlPlane::new(endpoint(server), options).expect("client")
}

async fn mount(server: &MockServer, m: &str, p: &str, response: ResponseTemplate) {
    Mock::given(method(m))
        .and(path(p))
        .respond_with(response)
        .mount(server)
        .await;
}

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
async fn a_lost_create_is_retried_with_the_same_key_and_places_one_run() {
    let server = mock_server().await;
    let run = sample_run("run-k4t9", RunStatus::Queued);
    Mock::given(method("POST"))
        .and(path("/v1/runs"))
        .respond_with(error_response(503, "unavailable", "try again", json!(null)))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/runs"))
        .and(header("idempotency-key", "key-1"))
        .respond_with(json_response(201, &run))
        .expect(1)
        .mount(&server)
        .await;
    let got = client(&server)
        .create_run("key-1", &ex::create_run())
        .await
        .expect("placed");
    assert_eq!(got, run);
    let requests: Vec<Request> = server.received_requests().await.expect("recording is on");
    let keys: Vec<&str> = requests
        .iter()
        .map(|r| {
            r.headers
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
        })
        .collect();
    assert_eq!(keys, ["key-1", "key-1"]);
    assert_eq!(requests[0].body, requests[1].body);
}

#[tokio::test(start_paused = true)]
async fn failing_server_gives_up_at_the_deadline_saying_what_was_tried() {
    let server =
        Server::start(|_, _| Reply::error("503 Service Unavailable", "unavailable", "draining"));
    let cp = server.client(Duration::from_millis(300));
    let e = cp.catalogue().await.expect_err("unavailable");
    assert!(e.is_unavailable());
    assert_eq!(e.code(), Some("unavailable"));
    let tries = server.count();
    assert!(tries >= 2, "retried: {tries}");
    let text = filter_snapshot(&e.to_string()).replace(&format!("{tries} tries"), "N tries");
    insta::assert_snapshot!(text, @"the control plane at `unix://[TEMP]` kept failing after N tries over [DURATION]: draining");
}

#[tokio::test(start_paused = true)]
async fn nothing_listening_is_unavailable_after_retries() {
    // A socket that was listened on and is gone: every connection is refused.
    let server = Server::start(|_, _| Reply::error("500 Internal Server Error", "x", "x"));
    let endpoint = server.endpoint();
    drop(server);
    let cp = crate::server::client_within(endpoint, Duration::from_millis(200));
    let e = cp.catalogue().await.expect_err("unavailable");
    assert!(e.is_unavailable());
    let text = filter_snapshot(&e.to_string());
    assert!(
        text.starts_with("could not reach the control plane at `unix://[TEMP]` after ")
            && text.contains(" tries over [DURATION]: "),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_within_the_deadline_arrives() {
    let server = Server::start(|_, _| Reply {
        delay: Duration::from_millis(100),
        ..Reply::json("200 OK", &ex::catalogue())
    });
    assert_eq!(
        server
            .client(Duration::from_secs(5))
            .catalogue()
            .await
            .expect("slow but in time"),
        ex::catalogue()
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_past_the_deadline_is_unavailable() {
    let server = Server::start(|_, _| Reply {
        delay: Duration::from_secs(30),
        ..Reply::json("200 OK", &ex::catalogue())
    });
    let cp = server.client(Duration::from_millis(200));
    let e = cp.catalogue().await.expect_err("too slow");
    assert!(e.is_unavailable());
    insta::assert_snapshot!(filter_snapshot(&e.to_string()), @"the control plane at `unix://[TEMP]` did not answer `GET /v1/catalogue` within [DURATION] (1 try)");
    assert!(e.to_string().contains("within 200ms"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn the_token_is_sent_but_never_shown() {
    let token = "tok_SECRET_abc123";
    // A careless server echoing the token, in a refusal and in a failure.
    let server = Server::start(move |head, _| match head.path() {
        "/v1/catalogue" if head.header("authorization") == Some(&format!("Bearer {token}")) => {
            Reply::json("200 OK", &ex::catalogue())
        }
        "/v1/secrets" => Reply::error(
            "401 Unauthorized",
            "unauthorized",
            &format!("bad token {token}"),
        ),
        "/v1/volumes" => Reply::error(
            "500 Internal Server Error",
            "internal",
            &format!("crashed on {token}"),
        ),
        _ => Reply::error("404 Not Found", "not_found", "no such route"),
    });
    let options = Options {
        deadline: Duration::from_millis(200),
        ..test_options(Some(token))
    };
    let cp = HttpControlPlane::new(server.endpoint(), options.clone()).expect("client");
    cp.catalogue().await.expect("the token was sent");
    let shown = [
        format!("{cp:?}"),
        format!("{options:?}"),
        format!("{}", Token::new(token)),
        format!("{:?}", Token::new(token)),
        format!("{:?}", cp.list_secrets().await.expect_err("refused")),
        cp.list_secrets().await.expect_err("refused").to_string(),
        format!("{:?}", cp.list_volumes().await.expect_err("failing")),
        cp.list_volumes().await.expect_err("failing").to_string(),
    ];
    for text in &shown {
        assert!(!text.contains(token), "the token shows in {text}");
    }
    assert_eq!(shown[1].matches("<redacted>").count(), 1, "{}", shown[1]);
    assert_eq!(shown[5], "bad token <redacted>");
}

#[tokio::test]
async fn an_upload_resumes_from_what_the_server_received() {
    let server = mock_server().await;
    Mock::given(method("PUT"))
        .and(path("/v1/volumes/v/blobs/h1"))
        .and(query_param("offset", "0"))
        .respond_with(error_response(
            409,
            "offset_mismatch",
            "have 4",
            json!({"received": 4}),
        ))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/v1/volumes/v/blobs/h1"))
        .and(query_param("offset", "4"))
        .and(query_param("total", "10"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("blob");
    std::fs::write(&file, b"xx0123456789").expect("write the blob");
    let source = BlobSource::File {
        path: file,
        offset: 2,
        len: 10,
    };
    client(&server)
        .upload_blob("v", "h1", 0, 10, source)
        .await
        .expect("resumed");
    let requests = server.received_requests().await.expect("recording");
    assert_eq!(requests[1].body, b"456789");
    assert_eq!(
        requests[1]
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/octet-stream")
    );
}

#[tokio::test]
async fn upload_blob_resuming_asks_what_is_missing_first() {
    let server = mock_server().await;
    let data = Bytes::from_static(b"0123456789");
    Mock::given(method("POST"))
        .and(path("/v1/volumes/v/blobs/missing"))
        .respond_with(json_response(
            200,
            &json!({"missing": ["h1"], "partial": {"h1": 6}}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("PUT"))
        .and(path("/v1/volumes/v/blobs/h1"))
        .and(query_param("offset", "6"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let cp = client(&server);
    let outcome = upload_blob_resuming(&cp, "v", "h1", &BlobSource::Bytes(data))
        .await
        .expect("sent");
    assert_eq!(outcome, UploadOutcome::Sent { from: 6 });
    let requests = server.received_requests().await.expect("recording");
    assert_eq!(
        requests.last().map(|r| r.body.as_slice()),
        Some(&b"6789"[..])
    );
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

/// A server holding `held` bytes of blob `h1` (of 10): `missing` says so, a `PUT` from
/// elsewhere gets 409 `offset_mismatch`, and a `PUT` from there takes `step` more bytes and
/// then hangs up, unless they complete the blob (201).
fn cutting_upload_server(step: u64) -> Server {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    let held = AtomicU64::new(0);
    Server::start(move |head, _| {
        let now = held.load(SeqCst);
        if head.path().ends_with("/blobs/missing") {
            return Reply::json(
                "200 OK",
                &json!({"missing": ["h1"], "partial": {"h1": now}}),
            );
        }
        let offset: u64 = head
            .line
            .split(['?', '&', ' '])
            .find_map(|p| p.strip_prefix("offset="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX);
        if offset != now {
            let details = json!({"received": now});
            return Reply::json(
                "409 Conflict",
                &json!({"error": {"code": "offset_mismatch", "message": "elsewhere", "details": details}}),
            );
        }
        let now = (now + step).min(10);
        held.store(now, SeqCst);
        if now == 10 {
            Reply::json("201 Created", &json!({}))
        } else {
            Reply::hang_up()
        }
    })
}

/// The offsets of the `PUT`s `server` got, in order.
fn put_offsets(server: &Server) -> Vec<String> {
    server
        .requests
        .lock()
        .expect("not poisoned")
        .iter()
        .filter(|h| h.line.starts_with("PUT "))
        .filter_map(|h| {
            h.line
                .split(['?', '&', ' '])
                .find_map(|p| p.strip_prefix("offset="))
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cut_upload_resumes_from_what_the_server_holds_each_time() {
    let server = cutting_upload_server(4);
    let outcome = upload_blob_resuming(
        &server.client(Duration::from_secs(5)),
        "v",
        "h1",
        &BlobSource::Bytes(Bytes::from_static(b"0123456789")),
    )
    .await
    .expect("the upload resumes to the end");
    assert_eq!(outcome, UploadOutcome::Sent { from: 0 });
    assert_eq!(
        put_offsets(&server),
        ["0", "4", "8"],
        "each try sends only the rest"
    );
}

#[tokio::test(start_paused = true)]
async fn an_upload_that_never_progresses_gives_up_at_its_deadline() {
    let server = cutting_upload_server(0);
    let e = server
        .client(Duration::from_millis(300))
        .upload_blob(
            "v",
            "h1",
            0,
            10,
            BlobSource::Bytes(Bytes::from_static(b"0123456789")),
        )
        .await
        .expect_err("nothing ever arrives");
    assert!(e.is_unavailable(), "{e}");
    insta::assert_snapshot!(e.to_string(), @"the upload of `h1` to volume `v` stopped at byte 0 of 10 and could not resume within 300ms");
    let cause = std::error::Error::source(&e).map(|c| c.to_string());
    insta::assert_snapshot!(cause.unwrap_or_default(), @"the upload `PUT /v1/volumes/v/blobs/h1?offset=0&total=10` was cut: client error (SendRequest): connection closed before message completed");
    assert!(
        put_offsets(&server).len() >= 2,
        "it tried again before giving up"
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
