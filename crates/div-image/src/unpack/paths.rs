//! An entry's path inside the root: cleaned lexically (`..` stops at the root), its parent
//! directories resolved with every symlink followed as if the root were `/`, so that
//! nothing resolves outside it.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use crate::disk::lstat;

/// The most symlinks a path may go through.
const MAX_LINKS: u32 = 255;

/// An entry's path as messages show it: from the image's root.
pub(super) fn display(rel: &Path) -> String {
    format!("/{}", rel.display())
}

/// The components of an archive path, `..` resolved lexically and clamped at the root.
pub(super) fn clean(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn join(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

/// Why a path could not be resolved.
pub(super) enum Resolve {
    /// It goes through more than [`MAX_LINKS`] symlinks.
    Loop,
    Io(io::Error),
}

/// Resolves `parts` inside `root`, following symlinks as if `root` were `/`: the result
/// never leaves it. Returns the resolved relative path and whether a symlink was followed.
/// `known`: directories known to be real (their `lstat` skipped), added to as more are met.
pub(super) fn resolve_in_root(
    root: &Path,
    parts: &[OsString],
    mut known: Option<&mut HashSet<PathBuf>>,
) -> Result<(PathBuf, bool), Resolve> {
    let mut stack: Vec<OsString> = Vec::new();
    let mut pending: VecDeque<OsString> = parts.iter().cloned().collect();
    let mut links = 0u32;
    let mut via_symlink = false;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            stack.pop();
            continue;
        }
        if c.is_empty() || c == "." {
            continue;
        }
        stack.push(c);
        let rel = join(&stack);
        if known.as_ref().is_some_and(|k| k.contains(&rel)) {
            continue;
        }
        let here = root.join(&rel);
        let Some(meta) = lstat(&here) else { continue };
        if !meta.file_type().is_symlink() {
            if meta.is_dir()
                && let Some(k) = known.as_mut()
            {
                k.insert(rel);
            }
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(Resolve::Loop);
        }
        via_symlink = true;
        let target = fs::read_link(&here).map_err(Resolve::Io)?;
        stack.pop();
        if target.is_absolute() {
            stack.clear();
        }
        let mut next: VecDeque<OsString> = VecDeque::new();
        for tc in target.components() {
            match tc {
                Component::Normal(n) => next.push_back(n.to_owned()),
                Component::ParentDir => next.push_back("..".into()),
                _ => {}
            }
        }
        next.extend(pending);
        pending = next;
    }
    Ok((join(&stack), via_symlink))
}

/// Reads a regular file of an unpacked tree, at most `max` bytes, resolving its path inside
/// `root` (a symlinked `/etc/passwd` pointing at the host's is read inside the tree).
pub(crate) fn read_in_root(root: &Path, path: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let parts = clean(Path::new(path));
    let (rel, _) = resolve_in_root(root, &parts, None).map_err(|e| match e {
        Resolve::Loop => io::Error::other("too many symlinks"),
        Resolve::Io(e) => e,
    })?;
    let full = root.join(rel);
    match lstat(&full) {
        Some(m) if m.is_file() => {
            let mut out = Vec::new();
            fs::File::open(&full)?.take(max).read_to_end(&mut out)?;
            Ok(Some(out))
        }
        _ => Ok(None),
    }
}
