//! The tree layers are applied to: its root, the directories in it known to be real (so
//! resolving a path skips their `lstat`), and the modes and times its directories get last.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::disk::{self, lstat};
use crate::unpack::error::UnpackError;
use crate::unpack::metadata::DirModes;
use crate::unpack::paths::{Resolve, display, resolve_in_root};

#[derive(Debug)]
pub(super) struct Tree {
    root: PathBuf,
    /// Paths known to be real directories (not symlinks).
    known: HashSet<PathBuf>,
    /// Final mode and mtime of each directory, applied last.
    pub(super) dirs: DirModes,
}

impl Tree {
    pub(super) fn new(root: PathBuf) -> Tree {
        Tree {
            root,
            known: HashSet::new(),
            dirs: DirModes::default(),
        }
    }

    /// The root.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (a path in the tree) on disk.
    pub(super) fn full(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// Resolves an entry's parent directories, `parts`, inside the root (`name`: the entry,
    /// for errors); returns the path and whether a symlink was followed.
    pub(super) fn resolve(
        &mut self,
        parts: &[OsString],
        name: &str,
    ) -> Result<(PathBuf, bool), UnpackError> {
        resolve_in_root(&self.root, parts, Some(&mut self.known)).map_err(|e| match e {
            Resolve::Loop => UnpackError::Invalid {
                path: name.to_owned(),
                why: "its parent directories go through more than 255 symlinks".to_owned(),
            },
            Resolve::Io(source) => UnpackError::Write {
                path: name.to_owned(),
                source,
            },
        })
    }

    /// Makes the directory `dir` (resolved) and its parents where it is not one already.
    pub(super) fn make_parents(&mut self, dir: &Path) -> Result<(), UnpackError> {
        if dir.as_os_str().is_empty() {
            return Ok(());
        }
        let full = self.full(dir);
        if !lstat(&full).is_some_and(|m| m.is_dir()) {
            fs::create_dir_all(&full).map_err(|source| UnpackError::Write {
                path: display(dir),
                source,
            })?;
            let mut p = dir.to_path_buf();
            while !p.as_os_str().is_empty() && self.known.insert(p.clone()) {
                p.pop();
            }
        }
        Ok(())
    }

    /// Notes `rel` as a real directory.
    pub(super) fn know_dir(&mut self, rel: PathBuf) {
        self.known.insert(rel);
    }

    /// Removes whatever is at `rel`, forgetting directories known below it.
    pub(super) fn remove_at(&mut self, rel: &Path) -> io::Result<()> {
        let full = self.full(rel);
        if lstat(&full).is_some_and(|m| m.is_dir()) {
            self.known.retain(|k| !k.starts_with(rel));
        }
        disk::remove_tree(&full)
    }
}
