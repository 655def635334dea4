//! div-server's integration tests: a real server in-process, real supervisors
//! (`div-supervise`), real sandboxes.

mod api;
mod conformance;
mod example;
mod harness;
mod runs;
