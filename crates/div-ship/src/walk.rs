//! The shipped set outside a git repository: everything but a fixed list of names.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Mutex;

use ignore::{WalkBuilder, WalkState};

use crate::ShipError;
use crate::git::Listed;

/// Names skipped wherever they appear (files or folders) when walking outside a repository.
pub const SKIPPED_NAMES: &[&str] = &[
    ".git",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    // tool caches
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".ipynb_checkpoints",
    ".hypothesis",
    ".pytype",
    // build output
    "dist",
    ".next",
    ".DS_Store",
];

/// Whether a file or folder called `name` is skipped outside a repository: one of
/// [`SKIPPED_NAMES`], a `*.pyc` file, or anything beginning with `.env`.
pub fn is_skipped(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    SKIPPED_NAMES.iter().any(|s| s.as_bytes() == bytes)
        || bytes.ends_with(b".pyc")
        || bytes.starts_with(b".env")
}

/// Walks `dir` with the `ignore` crate's parallel walker, all of its own filters off.
pub(crate) fn list(
    dir: &Path,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<(), ShipError> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let found = Mutex::new(Vec::new());
    let problems = Mutex::new(Vec::new());
    WalkBuilder::new(dir)
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .threads(threads)
        .filter_entry(|entry| entry.depth() == 0 || !is_skipped(entry.file_name()))
        .build_parallel()
        .run(|| {
            let found = &found;
            let problems = &problems;
            Box::new(move |result| {
                match result {
                    Ok(entry) => {
                        let is_listed = entry
                            .file_type()
                            .is_some_and(|t| t.is_file() || t.is_symlink());
                        if entry.depth() > 0 && is_listed {
                            found
                                .lock()
                                .expect("no walker thread panics")
                                .push(entry.into_path());
                        }
                    }
                    Err(err) => problems
                        .lock()
                        .expect("no walker thread panics")
                        .push(err.to_string()),
                }
                WalkState::Continue
            })
        });
    for path in found.into_inner().expect("no walker thread panics") {
        let rel = path
            .strip_prefix(dir)
            .expect("the walker yields paths under its root");
        out.push(Listed {
            path: crate::name::encode_path(rel.as_os_str().as_encoded_bytes()).into_owned(),
        });
    }
    for problem in problems.into_inner().expect("no walker thread panics") {
        warnings.push(format!("skipped what could not be read: {problem}"));
    }
    Ok(())
}
