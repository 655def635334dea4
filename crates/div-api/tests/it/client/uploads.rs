//! Uploads resumed from what the server holds (`upload.rs`, the one owner of upload
//! resumption), and given up at the deadline when they never progress.

use std::time::Duration;

use bytes::Bytes;
use div_api::*;
use div_test_support::mock::*;
use serde_json::json;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, ResponseTemplate};

use super::client;
use crate::server::{Reply, Server};

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
