//! div-ship's integration tests: the shipped set against real git, the walk, the hash cache,
//! the upload plan, materialising.

// Helpers outside `#[test]` functions panic on setup failures, as tests do.
#![allow(clippy::unwrap_used)]

mod cache;
mod git_set;
mod materialise;
mod plan;
mod summary;
mod support;
mod untracked_cache;
mod walk;
