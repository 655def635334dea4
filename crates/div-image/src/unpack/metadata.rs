//! An entry's owner, mode and times: ownership set where the process may (a refusal
//! ignored), and directories' modes and times kept for last ([`DirModes`]), so that a
//! read-only directory does not stop later layers from writing into it when not root.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::disk::lstat;
use crate::unpack::error::UnpackError;
use crate::unpack::paths::display;

/// Whether a failed chown is a refusal (not root, or an id outside the user namespace).
fn refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
        || e.kind() == io::ErrorKind::InvalidInput
        || e.raw_os_error() == Some(1)
}

/// Sets owner and group, ignoring a refusal (not root, or an id outside the user namespace).
pub(super) fn chown(p: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Ok(());
    };
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Err(e) if refused(&e) => Ok(()),
        other => other,
    }
}

/// `chown` of an open file, a refusal ignored as [`chown`] ignores it.
pub(super) fn fchown(f: &fs::File, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Ok(());
    };
    match std::os::unix::fs::fchown(f, Some(uid), Some(gid)) {
        Err(e) if refused(&e) => Ok(()),
        other => other,
    }
}

/// A header's mtime as a file's time.
pub(super) fn time(mtime: u64) -> filetime::FileTime {
    filetime::FileTime::from_unix_time(mtime as i64, 0)
}

/// The final mode and mtime of each directory, by its path in the root, applied last.
#[derive(Debug, Default)]
pub(super) struct DirModes(BTreeMap<PathBuf, (u32, u64)>);

impl DirModes {
    /// `rel` gets `mode` and `mtime` at the end.
    pub(super) fn set(&mut self, rel: PathBuf, mode: u32, mtime: u64) {
        self.0.insert(rel, (mode, mtime));
    }

    /// `rel` is no longer a directory of this tree's making.
    pub(super) fn forget(&mut self, rel: &Path) {
        self.0.remove(rel);
    }

    /// `rel` and everything below it are gone.
    pub(super) fn forget_below(&mut self, rel: &Path) {
        self.0.retain(|k, _| !k.starts_with(rel));
    }

    /// Sets directories' final modes and times under `root`, deepest first.
    pub(super) fn apply(&self, root: &Path) -> Result<(), UnpackError> {
        for (rel, (mode, mtime)) in self.0.iter().rev() {
            let full = root.join(rel);
            // Only a directory that is still a directory (never through a symlink).
            if !lstat(&full).is_some_and(|m| m.is_dir()) {
                continue;
            }
            let write = |source| UnpackError::Write {
                path: display(rel),
                source,
            };
            fs::set_permissions(&full, fs::Permissions::from_mode(*mode)).map_err(write)?;
            let t = time(*mtime);
            filetime::set_symlink_file_times(&full, t, t).map_err(write)?;
        }
        Ok(())
    }
}
