//! div-ship's integration tests: the shipped set against real git, the walk, the hash cache,
//! the upload plan, materialising.

mod cache;
mod git_set;
mod materialise;
mod plan;
mod summary;
mod support;
mod walk;
