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

/// A tree of at most this many entries (files and folders) is walked on the calling thread:
/// the parallel walker's threads sleep a millisecond before they see that a small walk is
/// over, which was most of a one-file project's listing.
const SMALL_WALK: usize = 1024;

/// The walker over `dir`: every one of the `ignore` crate's own filters off, links not
/// followed, [`SKIPPED_NAMES`] left out.
fn walker(dir: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(dir);
    builder
        .standard_filters(false)
        .hidden(false)
        .follow_links(false)
        .filter_entry(|entry| entry.depth() == 0 || !is_skipped(entry.file_name()));
    builder
}

/// What a walk found: the files and links, and what could not be read.
type Found = (Vec<std::path::PathBuf>, Vec<String>);

/// The walk of a small tree, on this thread; `None` as soon as it holds more than
/// [`SMALL_WALK`] entries (the parallel walk then starts over).
fn small_walk(dir: &Path) -> Option<Found> {
    let (mut found, mut problems) = (Vec::new(), Vec::new());
    for (seen, result) in walker(dir).build().enumerate() {
        if seen > SMALL_WALK {
            return None;
        }
        match result {
            Ok(entry) => {
                let is_listed = entry
                    .file_type()
                    .is_some_and(|t| t.is_file() || t.is_symlink());
                if entry.depth() > 0 && is_listed {
                    found.push(entry.into_path());
                }
            }
            Err(err) => problems.push(err.to_string()),
        }
    }
    Some((found, problems))
}

/// The walk of a bigger tree, with the `ignore` crate's parallel walker.
fn parallel_walk(dir: &Path) -> Found {
    let threads = crate::cores::cores().min(8);
    let found = Mutex::new(Vec::new());
    let problems = Mutex::new(Vec::new());
    walker(dir).threads(threads).build_parallel().run(|| {
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
    (
        found.into_inner().expect("no walker thread panics"),
        problems.into_inner().expect("no walker thread panics"),
    )
}

/// Walks `dir`: a small tree on this thread, a bigger one with the parallel walker.
pub(crate) fn list(
    dir: &Path,
    out: &mut Vec<Listed>,
    warnings: &mut Vec<String>,
) -> Result<(), ShipError> {
    let (found, problems) = small_walk(dir).unwrap_or_else(|| parallel_walk(dir));
    for path in found {
        let rel = path
            .strip_prefix(dir)
            .expect("the walker yields paths under its root");
        out.push(Listed {
            path: crate::name::encode_path(rel.as_os_str().as_encoded_bytes()).into_owned(),
        });
    }
    for problem in problems {
        warnings.push(format!("skipped what could not be read: {problem}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `files` files in `folders` folders, and what is always skipped beside them.
    fn tree(files: usize, folders: usize) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("a temp dir");
        for i in 0..files {
            let dir = tmp.path().join(format!("d{}", i % folders));
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::write(dir.join(format!("f{i}.py")), b"x").expect("write");
        }
        std::fs::create_dir_all(tmp.path().join("d0/node_modules/x")).expect("mkdir");
        std::fs::write(tmp.path().join("d0/node_modules/x/a.js"), b"x").expect("write");
        std::fs::write(tmp.path().join("d0/m.pyc"), b"x").expect("write");
        std::fs::write(tmp.path().join(".env.local"), b"x").expect("write");
        tmp
    }

    fn sorted(found: Found) -> (Vec<std::path::PathBuf>, Vec<String>) {
        let (mut f, p) = found;
        f.sort();
        (f, p)
    }

    /// A small tree is walked on this thread and lists what the parallel walk lists; a tree
    /// past the bound is handed to the parallel walk, which lists all of it.
    #[test]
    fn small_and_big_trees_list_the_same_as_the_parallel_walk() {
        let small = tree(40, 4);
        let alone = small_walk(small.path()).expect("a small tree is walked alone");
        assert_eq!(sorted(alone.clone()), sorted(parallel_walk(small.path())));
        assert_eq!(alone.0.len(), 40);

        let big = tree(SMALL_WALK + 200, 7);
        assert!(small_walk(big.path()).is_none(), "past the bound");
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        list(big.path(), &mut out, &mut warnings).expect("listed");
        assert_eq!(out.len(), SMALL_WALK + 200);
        assert!(
            out.iter().all(|l| l.path.ends_with(".py")),
            "the skipped names are left out"
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
