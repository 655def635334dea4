//! What each kind of entry becomes in the tree: a directory kept where one is, a file made
//! anew (or hard-linked from the layer store), a symlink, a hard link resolved inside the
//! root. Whatever was at an entry's path is unlinked first, never written in place.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use crate::disk::lstat;
use crate::entry::Item;
use crate::unpack::budget::Budget;
use crate::unpack::error::UnpackError;
use crate::unpack::metadata::{chown, fchown, time};
use crate::unpack::paths::{clean, display};
use crate::unpack::tree::Tree;

/// Where a regular file's contents come from.
pub(super) enum Body<'a> {
    /// The tar entry being read; with `keep`, the file made is also hard-linked there (a
    /// layer store's file).
    Stream {
        reader: &'a mut dyn Read,
        keep: Option<&'a Path>,
    },
    /// A layer store's file, hard-linked; `size`: its contents' bytes.
    Stored { path: &'a Path, size: u64 },
}

/// A regular file written from a stream: its contents' bytes and its blocks (512 bytes).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Written {
    pub(super) bytes: u64,
    pub(super) blocks: u64,
}

fn write_error(rel: &Path) -> impl Fn(io::Error) -> UnpackError + '_ {
    move |source| UnpackError::Write {
        path: display(rel),
        source,
    }
}

/// A directory: kept with its contents where one is, its mode and time set last.
pub(super) fn make_dir(
    tree: &mut Tree,
    rel: &Path,
    item: &Item,
    mode: u32,
) -> Result<(), UnpackError> {
    let dest = tree.full(rel);
    let write = write_error(rel);
    let existing = lstat(&dest);
    if !existing.as_ref().is_some_and(|m| m.is_dir()) {
        tree.remove_at(rel).map_err(&write)?;
        fs::create_dir(&dest).map_err(&write)?;
    }
    chown(&dest, item.uid, item.gid).map_err(&write)?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(mode | 0o700)).map_err(&write)?;
    tree.know_dir(rel.to_path_buf());
    tree.dirs.set(rel.to_path_buf(), mode, item.mtime);
    Ok(())
}

/// A regular file: whatever was at its path is unlinked first (never written in place:
/// it may be an inode other trees share), then the file is made anew from the stream,
/// or hard-linked from the layer store.
pub(super) fn make_file(
    tree: &mut Tree,
    budget: &mut Budget,
    rel: &Path,
    item: &Item,
    mode: u32,
    body: Body<'_>,
    buf: &mut [u8],
) -> Result<Written, UnpackError> {
    let dest = tree.full(rel);
    let write = write_error(rel);
    tree.remove_at(rel).map_err(&write)?;
    tree.dirs.forget(rel);
    let (reader, keep) = match body {
        Body::Stored { path, size } => {
            budget.charge_linked(size)?;
            fs::hard_link(path, &dest).map_err(&write)?;
            return Ok(Written::default());
        }
        Body::Stream { reader, keep } => (reader, keep),
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&dest)
        .map_err(&write)?;
    // Counted before each write: a sparse entry's holes are written as zeros, so what
    // is written can be more than the stream carries.
    let mut bytes = 0u64;
    loop {
        let n = match reader.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(UnpackError::Tar(e)),
        };
        budget.charge(tree.root(), n as u64, 0)?;
        io::Write::write_all(&mut f, &buf[..n]).map_err(&write)?;
        bytes += n as u64;
    }
    fchown(&f, item.uid, item.gid).map_err(&write)?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(&write)?;
    let t = time(item.mtime);
    filetime::set_file_handle_times(&f, Some(t), Some(t)).map_err(&write)?;
    let Some(keep) = keep else {
        return Ok(Written { bytes, blocks: 0 });
    };
    let blocks = f.metadata().map_err(&write)?.blocks();
    drop(f);
    fs::hard_link(&dest, keep).map_err(&write)?;
    Ok(Written { bytes, blocks })
}

/// A symbolic link, to whatever its target says (never followed here).
pub(super) fn make_symlink(tree: &mut Tree, rel: &Path, item: &Item) -> Result<(), UnpackError> {
    let dest = tree.full(rel);
    let write = write_error(rel);
    tree.remove_at(rel).map_err(&write)?;
    tree.dirs.forget(rel);
    std::os::unix::fs::symlink(OsStr::from_bytes(&item.link), &dest).map_err(&write)?;
    chown(&dest, item.uid, item.gid).map_err(&write)?;
    let t = time(item.mtime);
    filetime::set_symlink_file_times(&dest, t, t).map_err(&write)
}

/// A hard link to a file an earlier entry made, resolved inside the root like any path.
pub(super) fn make_link(
    tree: &mut Tree,
    rel: &Path,
    item: &Item,
    name: &str,
) -> Result<(), UnpackError> {
    let dest = tree.full(rel);
    let tparts = clean(Path::new(OsStr::from_bytes(&item.link)));
    let Some((tfile, tparent)) = tparts.split_last() else {
        return Err(UnpackError::Invalid {
            path: display(rel),
            why: "a hard link to the root".to_owned(),
        });
    };
    let (tdir, _) = tree.resolve(tparent, name)?;
    let source = tree.full(&tdir.join(tfile));
    match lstat(&source) {
        None => {
            return Err(UnpackError::Invalid {
                path: display(rel),
                why: format!(
                    "a hard link to `{}`, which no earlier entry created",
                    String::from_utf8_lossy(&item.link)
                ),
            });
        }
        Some(m) if m.is_dir() => {
            return Err(UnpackError::Invalid {
                path: display(rel),
                why: "a hard link to a directory".to_owned(),
            });
        }
        Some(_) => {}
    }
    if source == dest {
        return Ok(());
    }
    let write = write_error(rel);
    tree.remove_at(rel).map_err(&write)?;
    tree.dirs.forget(rel);
    fs::hard_link(&source, &dest).map_err(&write)
}
