//! The HTTP client against wiremock: every operation's happy path, errors with details,
//! retries, and the token kept out of every message. Deadlines and retries until a deadline
//! are tested against `server.rs`'s server on tokio's paused clock. By subject: `calls.rs`
//! (each operation, its answer and its errors), `retries.rs` (retries, deadlines, the
//! token), `uploads.rs` (resumed uploads); here, the client every test makes.

mod calls;
mod retries;
mod uploads;

use std::time::Duration;

use div_api::*;
use div_test_support::mock::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

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
