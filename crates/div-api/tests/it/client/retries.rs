//! Retries and deadlines: a lost create placed once, a failing or silent server given up
//! on at the deadline, and the token sent but never shown.

use std::time::Duration;

use div_api::*;
use div_test_support::filter_snapshot;
use div_test_support::mock::*;
use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, Request};

use super::client;
use crate::models::examples as ex;
use crate::server::{Reply, Server};

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
async fn a_refusal_then_no_answer_by_the_deadline_keeps_the_refusals_code() {
    // Seen under `.ci/stress`: a 429 for too many bad tokens, then a try the loaded server did
    // not answer in time. The refusal's code still reaches the caller (its hint hangs on it).
    let server = Server::start(|_, n| {
        if n == 0 {
            Reply::error(
                "429 Too Many Requests",
                "too_many_attempts",
                "too many bad tokens from `127.0.0.1`",
            )
        } else {
            Reply {
                delay: Duration::from_secs(30),
                ..Reply::json("200 OK", &ex::catalogue())
            }
        }
    });
    let cp = server.client(Duration::from_secs(2));
    let e = cp.catalogue().await.expect_err("not answered in time");
    assert!(e.is_unavailable());
    assert_eq!(e.code(), Some("too_many_attempts"), "{e}");
    assert!(
        e.to_string()
            .ends_with("(2 tries): too many bad tokens from `127.0.0.1`"),
        "{e}"
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
