//! div-server's integration tests: a real server in-process, real supervisors
//! (`div-supervise`), real sandboxes.

mod api;
mod conformance;
mod harness;
mod runs;
