//! The Unix socket transport, against a tiny hyper server on a `UnixListener`, on tokio's
//! paused clock (see `server.rs`).

use bytes::Bytes;
use div_api::{ControlPlane, Endpoint, HttpControlPlane};
use div_test_support::mock::test_options;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::models::examples as ex;

#[tokio::test(start_paused = true)]
async fn talks_over_a_unix_socket() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let socket = dir.path().join("server.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind the socket");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let body = match req.uri().path() {
                        "/v1/catalogue" => serde_json::to_vec(&ex::catalogue()),
                        _ => serde_json::to_vec(&ex::run()),
                    }
                    .expect("serializes");
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .expect("a response"),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let endpoint = Endpoint::parse(&format!("unix://{}", socket.display())).expect("address");
    assert!(endpoint.is_unix());
    let cp = HttpControlPlane::new(endpoint, test_options(None)).expect("client");
    assert_eq!(cp.catalogue().await.expect("catalogue"), ex::catalogue());
    assert_eq!(cp.get_run("run-k4t9").await.expect("a run"), ex::run());
}

#[tokio::test(start_paused = true)]
async fn a_missing_socket_is_unavailable() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let endpoint = Endpoint::unix(dir.path().join("absent.sock"));
    let options = div_api::Options {
        deadline: std::time::Duration::from_millis(100),
        ..test_options(None)
    };
    let cp = HttpControlPlane::new(endpoint, options).expect("client");
    let e = cp.catalogue().await.expect_err("nothing listens");
    assert!(e.is_unavailable());
    assert!(
        e.to_string()
            .starts_with("could not reach the control plane at `unix://"),
        "{e}"
    );
}
