//! div-server's integration tests: a real server in-process, real supervisors
//! (`div-supervise`), real sandboxes.

mod harness;
mod runs;
