//! Whiteouts: `.wh.NAME` removes `NAME` from lower layers; `.wh..wh..opq` empties its
//! directory of what lower layers put there. Either is recognised by name, whatever the
//! entry's type. Neither removes what the same layer added; one whose parent path goes
//! through a symlink is ignored.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::disk::lstat;
use crate::unpack::error::UnpackError;
use crate::unpack::tree::Tree;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// What an entry named `file` hides, where it is a whiteout: the name after `.wh.`
/// (`.wh..opq` for an opaque one).
pub(super) fn hidden(file: &str) -> Option<&str> {
    file.strip_prefix(WHITEOUT_PREFIX)
}

/// What a whiteout did.
pub(super) enum Whiteout {
    Applied,
    /// Its parent path goes through a symlink: ignored.
    ThroughSymlink,
}

/// Applies the whiteout `name`, in the directory `parent`, that hides `hidden`, sparing
/// what this layer wrote (`touched`).
pub(super) fn apply(
    tree: &mut Tree,
    parent: &[OsString],
    hidden: &str,
    name: &str,
    touched: &HashSet<PathBuf>,
) -> Result<Whiteout, UnpackError> {
    let (dir, via_symlink) = tree.resolve(parent, name)?;
    if via_symlink {
        tracing::warn!(entry = %name, "whiteout through a symlink ignored");
        return Ok(Whiteout::ThroughSymlink);
    }
    let write = |source| UnpackError::Write {
        path: name.to_owned(),
        source,
    };
    if hidden == &OPAQUE[WHITEOUT_PREFIX.len()..] {
        let full = tree.full(&dir);
        if lstat(&full).is_some_and(|m| m.is_dir()) {
            remove_lower_children(tree, &dir, touched).map_err(write)?;
        }
    } else if !hidden.is_empty() && hidden != "." && hidden != ".." {
        remove_lower(tree, &dir.join(hidden), touched).map_err(write)?;
    }
    Ok(Whiteout::Applied)
}

/// Removes `rel` unless this layer wrote it; where this layer wrote inside it, removes
/// only what lower layers left there.
fn remove_lower(tree: &mut Tree, rel: &Path, touched: &HashSet<PathBuf>) -> io::Result<()> {
    let full = tree.full(rel);
    let Some(meta) = lstat(&full) else {
        return Ok(());
    };
    if !touched.contains(rel) {
        tree.dirs.forget_below(rel);
        return tree.remove_at(rel);
    }
    if meta.is_dir() {
        remove_lower_children(tree, rel, touched)?;
    }
    Ok(())
}

fn remove_lower_children(
    tree: &mut Tree,
    rel: &Path,
    touched: &HashSet<PathBuf>,
) -> io::Result<()> {
    let full = tree.full(rel);
    let mut names: Vec<OsString> = fs::read_dir(&full)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for n in names {
        remove_lower(tree, &rel.join(n), touched)?;
    }
    Ok(())
}
