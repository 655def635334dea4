//! The shipped set inside a repository is what `git ls-files -co --exclude-standard` prints.
//! By what decides it: `ignores.rs` (ignore files and `core.excludesFile`), `index.rs` (what
//! the index tracks, and its states), `nested.rs` (submodules and repositories inside),
//! `repository.rs` (which repository, where its work tree is, whose it is), `names.rs`
//! (links, names and kinds of files), `trees.rs` (wide and deep trees, walked as git walks),
//! `random_trees.rs` (random trees against git); here, `check`, which each uses. Many are
//! the cases issue 15 found where div and git differed.

mod ignores;
mod index;
mod names;
mod nested;
mod random_trees;
mod repository;
mod trees;

use std::path::Path;

use crate::support::{assert_matches_git, git_init, ship_set};

/// Builds a repository with `setup`, checks div-ship against git from `run_in` (relative to the
/// repository), and that the set is `expect`.
fn check(setup: impl FnOnce(&Path), run_in: &str, expect: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    git_init(&repo);
    setup(&repo);
    let dir = repo.join(run_in);
    assert_matches_git(&dir);
    let got: Vec<String> = ship_set(&dir).into_iter().collect();
    assert_eq!(got, expect, "from `{run_in}`");
}
