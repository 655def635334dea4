//! A tree committed at a path of a volume: checked, its blobs found, written whole where no
//! run sees it and moved into place, never over anything nor through a link.

use std::fs;
use std::path::{Path, PathBuf};

use div_api::{CommitTree, CommittedTree};

use super::beneath::{folder_beneath, split};
use super::blobs::{locate_blobs, source};
use super::error::{CommitError, PathRefused};
use super::paths::{Sources, commit_lock, committed_tree, on_disk, staging, valid_rel};
use super::{Volumes, put, require_volume};
use crate::rules;

/// The hash of each file of a tree, in its order; a file without one refuses the tree.
pub(super) fn file_hashes(entries: &[div_api::TreeEntry]) -> Result<Vec<&str>, CommitError> {
    let mut hashes = Vec::new();
    for entry in entries {
        if entry.kind != div_api::EntryKind::File {
            continue;
        }
        let Some(hash) = &entry.hash else {
            return Err(CommitError::NoHash(entry.path.clone()));
        };
        hashes.push(hash.as_str());
    }
    Ok(hashes)
}

/// Writes `entries` into the folder `dir` (which exists), each file a hard link to its blob
/// where `sources` found it or, executable, to the blob's executable twin, which lives in the
/// blob folder whoever is the blob's home (div-ship's `link_into`): a committed tree is
/// never written again, so a file is stored once however many trees hold it.
pub(super) fn link_tree(
    vols: &Volumes<'_>,
    volume: &str,
    entries: &[div_api::TreeEntry],
    sources: &Sources,
    dir: &Path,
) -> Result<(), CommitError> {
    rules::link_into(
        entries,
        |h| source(vols, volume, sources, h),
        |h| {
            let mut twin = vols.home.blob_path(volume, h).into_os_string();
            twin.push(div_ship::EXECUTABLE_TWIN_SUFFIX);
            PathBuf::from(twin)
        },
        dir,
    )
    .map_err(|e| CommitError::Written(div_api::error_chain(&e)))
}

/// Commits `tree` into `volume`: whether it was made now (`false`: the same tree was there),
/// and what it holds.
pub(crate) fn commit_tree(
    vols: &Volumes<'_>,
    volume: &str,
    tree: &CommitTree,
) -> Result<(bool, CommittedTree), CommitError> {
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    require_volume(vols, volume)?;
    if !valid_rel(&tree.path) {
        return Err(PathRefused::NotInside(tree.path.clone()).into());
    }
    rules::validate_entries(&tree.entries)
        .map_err(|e| CommitError::BadTree(div_api::error_chain(&e)))?;
    let mut entries = tree.entries.clone();
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    // The same tree committed before at the same path (an unchanged project's next run):
    // known at once, without asking the store about each of its blobs again (they were
    // all there when it was first committed, and blobs are never taken back while a tree
    // names them).
    let digest = (!tree.path.is_empty()).then(|| div_api::tree_digest(&entries));
    if let Some(digest) = &digest
        && let Some((existing, _, _)) = vols.store.tree(volume, &tree.path)?
        && existing == *digest
    {
        vols.store.touch_tree(volume, &tree.path)?;
        return Ok((
            false,
            committed_tree(volume, &tree.path, &entries, Some(digest)),
        ));
    }
    let hashes = file_hashes(&tree.entries)?;
    let (sources, missing) = locate_blobs(vols, volume, &hashes)?;
    if !missing.is_empty() {
        return Err(CommitError::NotSent(missing));
    }
    let Some(digest) = digest else {
        return put::add_to_root(vols, volume, &entries, &sources);
    };
    let committed = committed_tree(volume, &tree.path, &entries, Some(&digest));
    if let Some((existing, _, _)) = vols.store.tree(volume, &tree.path)? {
        if existing == digest {
            return Ok((false, committed));
        }
        return Err(CommitError::AnotherTree {
            volume: volume.to_owned(),
            path: tree.path.clone(),
        });
    }
    check_place(vols, volume, &tree.path)?;
    // Written whole where no run sees it, then moved into place.
    let root = vols.home.volume_dir(volume);
    let tmp = staging(vols, volume, &root, "put")?;
    // A tree committed at a path is never written again (a run sees it read-only, a put into
    // it is refused): its files are its blobs, linked, so a file is stored once however many
    // trees hold it.
    let placed = fs::create_dir(&tmp)
        .map_err(CommitError::from)
        .and_then(|()| link_tree(vols, volume, &entries, &sources, &tmp))
        .and_then(|()| move_into_place(vols, volume, &tree.path, &tmp));
    let _ = fs::remove_dir_all(&tmp);
    placed?;
    vols.store.add_tree(
        volume,
        &tree.path,
        &digest,
        committed.files,
        committed.bytes,
    )?;
    Ok((true, committed))
}

/// Refuses a commit at `path` where something is already (409), or where a folder on the
/// way is not a folder: a link there (a run can leave one in a volume: `code` → /etc) would
/// carry the commit out of the volume.
pub(super) fn check_place(vols: &Volumes<'_>, volume: &str, path: &str) -> Result<(), CommitError> {
    let dest = vols.home.volume_dir(volume).join(path);
    if fs::symlink_metadata(&dest).is_ok() {
        return Err(CommitError::Exists {
            volume: volume.to_owned(),
            path: path.to_owned(),
        });
    }
    let parts: Vec<&str> = path.split('/').collect();
    for depth in 1..parts.len() {
        let above = parts[..depth].join("/");
        if fs::symlink_metadata(vols.home.volume_dir(volume).join(&above))
            .is_ok_and(|m| !m.is_dir())
        {
            return Err(CommitError::NotAFolder {
                volume: volume.to_owned(),
                above,
                path: path.to_owned(),
            });
        }
    }
    Ok(())
}

/// Moves the tree written whole at `tmp` (where no run sees it) to `path` in the volume,
/// beneath folders opened without following links (made when missing), never over anything:
/// a folder a run swaps for a link meanwhile refuses the commit instead of carrying it out of
/// the volume. The caller holds the volume's commit lock.
pub(super) fn move_into_place(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
    tmp: &Path,
) -> Result<(), CommitError> {
    let root = vols.home.volume_dir(volume);
    let rel = on_disk(path)?;
    let (parts, name) = split(&rel);
    let dir = folder_beneath(&root, &parts, true)
        .and_then(|d| d.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| on_the_way(volume, path, e))?;
    let moved = rustix::fs::renameat_with(
        rustix::fs::CWD,
        tmp,
        &dir,
        name,
        rustix::fs::RenameFlags::NOREPLACE,
    );
    // A filesystem without `RENAME_NOREPLACE` (NFS): a plain rename, which still never
    // replaces a folder that holds anything (the commit lock is held, and the place was
    // checked empty).
    let moved = match moved {
        Err(rustix::io::Errno::INVAL) => rustix::fs::renameat(rustix::fs::CWD, tmp, &dir, name),
        other => other,
    };
    moved.map_err(|e| on_the_way(volume, path, e.into()))
}

/// A commit's place that could not be reached: a link or a file on its way, or something
/// already there (a run may have made it since it was checked); other errors as they are.
fn on_the_way(volume: &str, path: &str, e: std::io::Error) -> CommitError {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR | libc::EEXIST | libc::ENOTEMPTY) => {
            CommitError::OnTheWay {
                volume: volume.to_owned(),
                path: path.to_owned(),
            }
        }
        _ => CommitError::from(e),
    }
}
