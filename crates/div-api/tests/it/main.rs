//! div-api's integration tests: the OpenAPI document against the route table and the models,
//! the client against the route table, the log framing,
//! and the HTTP client against wiremock and small hand-written servers.
//!
//! No test depends on how fast the machine is: tests of deadlines and retries run on
//! tokio's paused clock against a server on the test's own runtime (`server.rs`), and the
//! wiremock tests, whose server runs on a thread of its own, have a deadline no busy
//! machine reaches.

mod client;
mod logframe;
mod logstream;
mod models;
mod openapi;
mod readfile;
mod routes;
mod server;
mod unix;
