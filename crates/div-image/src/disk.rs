//! Trees on disk: what they take (each hard-linked inode once) and their removal, neither
//! following a symlink.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

/// What is at `p` itself (a symlink not followed), or `None`.
pub(crate) fn lstat(p: &Path) -> Option<fs::Metadata> {
    fs::symlink_metadata(p).ok()
}

/// Removes whatever is at `p` (a tree, a file, a symlink) without following a symlink there;
/// nothing there is no error. Directories without the owner's rwx are given it first (so a
/// tree is removable when not root).
pub(crate) fn remove_tree(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            make_writable_tree(p);
            fs::remove_dir_all(p)
        }
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives the owner rwx on every directory below `p` so that it can be removed when not root.
fn make_writable_tree(p: &Path) {
    if let Some(m) = lstat(p)
        && m.is_dir()
    {
        let mode = m.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(mode | 0o700));
        }
        if let Ok(rd) = fs::read_dir(p) {
            for e in rd.flatten() {
                make_writable_tree(&e.path());
            }
        }
    }
}

/// Total bytes of the files under `p` (each hard-linked inode once), without following
/// symlinks.
pub(crate) fn tree_size(p: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Some(m) = lstat(p) else { return 0 };
        if m.is_dir() {
            let mut total = m.blocks() * 512;
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    total += walk(&e.path(), seen);
                }
            }
            total
        } else if seen.insert((m.dev(), m.ino())) {
            m.blocks() * 512
        } else {
            0
        }
    }
    walk(p, &mut HashSet::new())
}

/// An unpacked tree's sizes on disk, in bytes of blocks, each inode once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeSizes {
    /// Everything the tree holds.
    pub(crate) total: u64,
    /// What it alone holds: directories, symlinks, and files whose every link is inside
    /// it (the others are shared with the layer store, and go only with their last link).
    pub(crate) own: u64,
}

/// The sizes of the tree under `p`, without following symlinks.
pub(crate) fn tree_sizes(p: &Path) -> TreeSizes {
    /// Per inode met: its blocks' bytes, its link count, and the links met in the tree.
    type Inodes = HashMap<(u64, u64), (u64, u64, u64)>;
    fn walk(p: &Path, dirs: &mut u64, inodes: &mut Inodes) {
        let Some(m) = lstat(p) else { return };
        if m.is_dir() {
            *dirs += m.blocks() * 512;
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    walk(&e.path(), dirs, inodes);
                }
            }
        } else {
            inodes
                .entry((m.dev(), m.ino()))
                .or_insert((m.blocks() * 512, m.nlink(), 0))
                .2 += 1;
        }
    }
    let (mut dirs, mut inodes) = (0, Inodes::new());
    walk(p, &mut dirs, &mut inodes);
    let mut sizes = TreeSizes {
        total: dirs,
        own: dirs,
    };
    for (bytes, nlink, met) in inodes.into_values() {
        sizes.total += bytes;
        if met >= nlink {
            sizes.own += bytes;
        }
    }
    sizes
}
