//! div-api's integration tests: the OpenAPI document against the models, the log framing,
//! and the HTTP client against wiremock and small hand-written servers.

mod client;
mod logframe;
mod logstream;
mod models;
mod openapi;
mod readfile;
mod unix;
