//! The conformance suite from div-test-support, against this server through the real client.

use div_api::{Endpoint, HttpControlPlane, Options};
use div_test_support::{ConformanceContext, conformance};

use crate::harness::Server;

#[tokio::test(flavor = "multi_thread")]
async fn the_server_passes_the_conformance_suite() {
    let server = Server::start().await;
    let endpoint = Endpoint::parse(&format!("unix://{}", server.socket().display()))
        .expect("a socket endpoint");
    let client = HttpControlPlane::new(endpoint, Options::default()).expect("a client");
    let ctx = ConformanceContext {
        runs_execute: true,
        ..ConformanceContext::default()
    };
    let report = conformance(&client, &ctx).await;
    report.assert_passed();
    assert!(report.passed.len() > 10, "{:?}", report.passed);
}
