//! Reading a volume: its tree listed, a file opened without following a link a run left,
//! whether a tree is committed at a path.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use div_api::{CommittedTree, VolumeEntry};

use super::beneath::open_in;
use super::error::{PathRefused, ReadError};
use super::paths::{on_disk, valid_rel};
use super::{Volumes, require_volume};

fn walk(root: &Path, dir: &Path, out: &mut Vec<VolumeEntry>) -> std::io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        // A name that is not UTF-8 is escaped as div-ship escapes it, never made lossy.
        let rel = path
            .strip_prefix(root)
            .map(|p| div_ship::encode_path(p.as_os_str().as_bytes()).into_owned())
            .unwrap_or_default();
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            out.push(VolumeEntry {
                path: rel,
                kind: "symlink".into(),
                size: 0,
                executable: false,
                target: fs::read_link(&path)
                    .ok()
                    .map(|t| div_ship::encode_path(t.as_os_str().as_bytes()).into_owned()),
                extra: Default::default(),
            });
        } else if meta.is_dir() {
            if rel.starts_with(".tmp-") {
                continue;
            }
            // The folder for code snapshots the server makes in every volume before a run
            // starts (`runs::launcher`), while it holds none, is not the user's.
            if rel == "code" && fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()) {
                continue;
            }
            out.push(VolumeEntry {
                path: rel,
                kind: "dir".into(),
                size: 0,
                executable: false,
                target: None,
                extra: Default::default(),
            });
            walk(root, &path, out)?;
        } else {
            use std::os::unix::fs::PermissionsExt;
            out.push(VolumeEntry {
                path: rel,
                kind: "file".into(),
                size: meta.len(),
                executable: meta.permissions().mode() & 0o111 != 0,
                target: None,
                extra: Default::default(),
            });
        }
    }
    Ok(())
}

pub(crate) fn list_tree(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
) -> Result<Vec<VolumeEntry>, ReadError> {
    require_volume(vols, volume)?;
    if !valid_rel(path) {
        return Err(PathRefused::NotInside(path.to_owned()).into());
    }
    let root = vols.home.volume_dir(volume);
    let at = root.join(on_disk(path)?);
    let meta = fs::symlink_metadata(&at).map_err(|_| ReadError::NoEntry {
        volume: volume.to_owned(),
        path: path.to_owned(),
    })?;
    let mut out = Vec::new();
    if meta.is_dir() {
        walk(&root, &at, &mut out)?;
    } else {
        let parent = at.parent().unwrap_or(&root).to_path_buf();
        let mut all = Vec::new();
        walk(&root, &parent, &mut all)?;
        out.extend(all.into_iter().filter(|e| e.path == path));
    }
    Ok(out)
}

/// `GET /v1/volumes/{name}/trees?path=P&digest=D`: the tree committed at `P` when its digest
/// is `D` (`div_api::tree_digest`), else `404 not_found`. What lets an unchanged project's
/// next run skip sending its hashes and its tree.
pub(crate) fn tree_held(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
    digest: &str,
) -> Result<CommittedTree, ReadError> {
    require_volume(vols, volume)?;
    if path.is_empty() || !valid_rel(path) {
        return Err(PathRefused::NoTreeThere(path.to_owned()).into());
    }
    match vols.store.tree(volume, path)? {
        Some((held, files, bytes)) if held == digest => {
            vols.store.touch_tree(volume, path)?;
            Ok(CommittedTree {
                volume: volume.to_owned(),
                path: path.to_owned(),
                files,
                bytes,
                digest: Some(held),
                extra: Default::default(),
            })
        }
        Some(_) => Err(ReadError::AnotherTree {
            volume: volume.to_owned(),
            path: path.to_owned(),
        }),
        None => Err(ReadError::NoTree {
            volume: volume.to_owned(),
            path: path.to_owned(),
        }),
    }
}

/// A file of a volume, opened for reading: links inside the volume are resolved (one that
/// leaves it, or anything but a regular file, is "no file"), then the resolved path is opened
/// beneath the volume one folder at a time without following a link, the file itself
/// `O_NOFOLLOW | O_NONBLOCK`: a run that swaps the file or a folder for a link (to a host
/// file) or a FIFO after the path was resolved gets "no file", never the host's file nor a
/// read that blocks.
pub(crate) fn open_file(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
) -> Result<fs::File, ReadError> {
    require_volume(vols, volume)?;
    if path.is_empty() || !valid_rel(path) {
        return Err(PathRefused::NotInside(path.to_owned()).into());
    }
    let root = vols.home.volume_dir(volume).canonicalize()?;
    let not_found = || ReadError::NoFile {
        volume: volume.to_owned(),
        path: path.to_owned(),
    };
    let real = root
        .join(on_disk(path)?)
        .canonicalize()
        .map_err(|_| not_found())?;
    let rel = real.strip_prefix(&root).map_err(|_| not_found())?;
    match open_in(&root, rel) {
        Ok(Some(file)) => Ok(file),
        Ok(None) => Err(not_found()),
        // Not there, or a link or a FIFO where the file or a folder was: "no file". Anything
        // else (out of file descriptors, an I/O error) is the server's trouble, said as it is,
        // never "no file".
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ENOTDIR | libc::ENXIO | libc::EACCES)
                ) =>
        {
            Err(not_found())
        }
        Err(e) => Err(ReadError::from(e)),
    }
}
