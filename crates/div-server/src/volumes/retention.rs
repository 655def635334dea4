//! Code snapshots' retention: each `div run` of changed code commits a new snapshot,
//! `<project>-code/code/<id>`, so without a rule a project's code volume grows by one tree a
//! change.
//!
//! **The rule.** After a new snapshot is committed in a volume, its snapshots are counted by
//! when each was last used (committed, or found held by a run's `GET …/trees`). The
//! `keep_code_snapshots` most recently used ones (`settings.json`, 10 by default) are kept,
//! and so is every snapshot that a queued or running run names, that was used in the last
//! [`RECENT_MS`], or that is a model's version (`models`). The rest are removed.
//!
//! **No run is placed from a removed snapshot.** Placing a run holds its code volume's commit
//! lock from the check that its code is there to its record, and a pass holds it throughout:
//! a pass sees every run placed before it, and a run placed after it is refused, saying its
//! code is not in the volume. The short [`RECENT_MS`] keeps that refusal away from a client
//! between its commit and its run while other clients commit more snapshots than are kept.
//!
//! **Removing one**, with the volume's commit lock held:
//! - its record goes first, so no run is placed from it;
//! - its folder is renamed beneath the volume (never through a link a run left on the way)
//!   into the volume's blob folder, which no run sees;
//! - it is deleted there;
//! - then each blob that one of its files was a link to, and that no other tree now links
//!   (one link left: the blob's own), is let go as well, record first.
//!
//! An executable file is a link to its blob's executable twin (`<hash>.x`, the same bytes
//! with mode `0755`): a blob goes when neither it nor its twin is linked by a tree any more,
//! and a twin no tree links goes alone. A blob that `div storage put` sent is never let go
//! this way (puts copy, so nothing says which files still need it).

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use div_api::RunStatus;

use super::Volumes;
use super::beneath::{folder_beneath, split};
use super::error::RetentionError;
use super::paths::{commit_lock, unique_name, valid_hash};
use crate::settings::Settings;
use div_runtime::clock::now_ms;

/// The trees the rule counts: `div run`'s code snapshots.
pub(crate) const SNAPSHOTS: &str = "code/";

/// A snapshot used this recently (milliseconds) is kept whatever the count: a client may be
/// between its commit (or its "is it held?") and placing its run.
pub(crate) const RECENT_MS: u64 = 2_000;

/// What one pass let go.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Pruned {
    /// Snapshots removed.
    pub(crate) snapshots: Vec<String>,
    /// Blobs let go.
    pub(crate) blobs: usize,
}

/// The rule applied to `volume` (after a new snapshot was committed there), with its commit
/// lock held for the whole pass.
pub(crate) fn prune(vols: &Volumes<'_>, volume: &str) -> Result<Pruned, RetentionError> {
    let keep = Settings::read(vols.home)?.keep_code_snapshots();
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    let mut going: HashSet<String> = HashSet::new();
    for status in [RunStatus::Queued, RunStatus::Running] {
        for record in vols.store.runs_with_status(status)? {
            if let Some(code) = record.run.code
                && code.volume == volume
            {
                going.insert(code.path);
            }
        }
    }
    let now = now_ms();
    let mut pruned = Pruned::default();
    let mut freed: HashSet<(u64, u64)> = HashSet::new();
    for (i, (path, used_ms)) in vols
        .store
        .trees_by_use(volume, SNAPSHOTS)?
        .into_iter()
        .enumerate()
    {
        // A model's version is kept as long as the model keeps it (`div models rm`).
        if i < keep
            || going.contains(&path)
            || now.saturating_sub(used_ms) < RECENT_MS
            || vols.store.model_tree_at(volume, &path)?
        {
            continue;
        }
        remove_one(vols, volume, &path, &mut freed)?;
        pruned.snapshots.push(path);
    }
    if !freed.is_empty() {
        pruned.blobs = let_go(vols, volume, &freed)?;
    }
    Ok(pruned)
}

/// Removes the committed tree at `path` of `volume` (a model's version that `div models rm`
/// let go), as the rule removes a snapshot, and the blobs only it linked.
pub(crate) fn remove(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
) -> Result<usize, RetentionError> {
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    let mut freed: HashSet<(u64, u64)> = HashSet::new();
    remove_one(vols, volume, path, &mut freed)?;
    if freed.is_empty() {
        return Ok(0);
    }
    let_go(vols, volume, &freed)
}

/// One tree removed: its record first, then its folder (taken out of the volume, its homed
/// blobs kept in the blob folder), the links it held added to `freed`. The caller holds the
/// volume's commit lock.
fn remove_one(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
    freed: &mut HashSet<(u64, u64)>,
) -> Result<(), RetentionError> {
    vols.store.remove_tree(volume, path)?;
    match take_away(vols, volume, path) {
        Ok(Some(trash)) => {
            rehome(vols, volume, path, &trash)?;
            links_in(&trash, freed);
            if let Err(e) = fs::remove_dir_all(&trash) {
                tracing::warn!(volume, path, "could not delete a removed snapshot: {e}");
            }
        }
        Ok(None) => {
            for (hash, _) in vols.store.blobs_homed_in(volume, path)? {
                vols.store.remove_blob(volume, &hash)?;
            }
        }
        Err(e) => tracing::warn!(volume, path, "could not remove a snapshot: {e}"),
    }
    Ok(())
}

/// Moves the snapshot at `path` out of the volume, opening each folder on the way without
/// following a link: into the volume's blob folder where it is on the same filesystem, else
/// beside the volume's files under `.tmp-`, which listings leave out. `None`: it was not there.
fn take_away(vols: &Volumes<'_>, volume: &str, path: &str) -> std::io::Result<Option<PathBuf>> {
    let root = vols.home.volume_dir(volume);
    let Some(rel) = div_ship::fs_path(path) else {
        return Ok(None);
    };
    let (parts, name) = split(&rel);
    let Some(from) = folder_beneath(&root, &parts, false)? else {
        return Ok(None);
    };
    let trash = unique_name("removed");
    let blobs = vols.home.blob_dir(volume);
    fs::create_dir_all(&blobs)?;
    let gone = |to: &Path, as_name: &str| -> std::io::Result<bool> {
        let to_dir = folder_beneath(to, &[], false)?.ok_or(std::io::ErrorKind::NotFound)?;
        match rustix::fs::renameat(&from, name, &to_dir, as_name) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    match gone(&blobs, &trash) {
        Ok(true) => Ok(Some(blobs.join(trash))),
        Ok(false) => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            // Left out of the volume's listings while it is deleted, as a staged put is.
            let beside = format!(".tmp-{trash}");
            Ok(gone(&root, &beside)?.then(|| root.join(beside)))
        }
        Err(e) => Err(e),
    }
}

/// Each blob whose home was a file of the removed snapshot `path` (a staged commit wrote it
/// there, `volumes::stage`), now at `trash`, is linked into the volume's blob folder under
/// its hash and lives there from now on: whether it is let go with the snapshot is then
/// decided as for every blob there (`let_go`: when no tree links it any more). A home that
/// cannot be kept so (it is not there, or on another file system) is forgotten, and a tree
/// that needs the blob again has it sent again.
fn rehome(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
    trash: &Path,
) -> Result<(), RetentionError> {
    let blobs = vols.home.blob_dir(volume);
    for (hash, home) in vols.store.blobs_homed_in(volume, path)? {
        let file = home
            .strip_prefix(path)
            .and_then(|rel| rel.strip_prefix('/'))
            .and_then(div_ship::fs_path)
            .map(|rel| trash.join(rel));
        let kept = valid_hash(&hash)
            && file.is_some_and(|file| {
                fs::symlink_metadata(&file).is_ok_and(|m| m.is_file())
                    && match fs::hard_link(&file, blobs.join(&hash)) {
                        Ok(()) => true,
                        // A copy sent the other way is there already: it is the blob.
                        Err(e) => e.kind() == std::io::ErrorKind::AlreadyExists,
                    }
            });
        if kept {
            vols.store.unhome_blob(volume, &hash)?;
        } else {
            vols.store.remove_blob(volume, &hash)?;
        }
    }
    Ok(())
}

/// The (device, inode) of each plain file under `dir` that is a link (a snapshot's file
/// linked to its blob).
fn links_in(dir: &Path, out: &mut HashSet<(u64, u64)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(m) = entry.metadata() else { continue };
        if m.is_dir() {
            links_in(&entry.path(), out);
        } else if m.is_file() && m.nlink() > 1 {
            out.insert((m.dev(), m.ino()));
        }
    }
}

/// Lets go each blob of `volume` that one of `freed` is, itself or its executable twin
/// (`div_ship::executable_blob`), and that no tree links any more, through either: its
/// record, its twin and itself. A twin no tree links any more, of a blob some tree still
/// links, goes alone.
///
/// In two steps: every blob to let go is picked first, while all of them still exist, and
/// only then deleted. An inode's number names a file only while the file exists: picking
/// and deleting in one pass let a blob uploaded during the pass (a client's next commit
/// does not wait for this one's pass) take the number of a blob just deleted, be picked as
/// well, and vanish between its upload and its commit.
fn let_go(
    vols: &Volumes<'_>,
    volume: &str,
    freed: &HashSet<(u64, u64)>,
) -> Result<usize, RetentionError> {
    let Ok(entries) = fs::read_dir(vols.home.blob_dir(volume)) else {
        return Ok(0);
    };
    /// What is on disk of one blob: itself and its twin, each with its path, whether no
    /// tree links it (one link left) and whether it is one of `freed`.
    #[derive(Default)]
    struct OnDisk {
        blob: Option<(PathBuf, bool, bool)>,
        twin: Option<(PathBuf, bool, bool)>,
    }
    let mut found: std::collections::HashMap<String, OnDisk> = std::collections::HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (hash, twin) = match name.strip_suffix(div_ship::EXECUTABLE_TWIN_SUFFIX) {
            Some(hash) => (hash, true),
            None => (name, false),
        };
        if !valid_hash(hash) {
            continue;
        }
        let Ok(m) = entry.metadata() else { continue };
        if !m.is_file() {
            continue;
        }
        let seen = (
            entry.path(),
            m.nlink() == 1,
            freed.contains(&(m.dev(), m.ino())),
        );
        let on_disk = found.entry(hash.to_owned()).or_default();
        if twin {
            on_disk.twin = Some(seen);
        } else {
            on_disk.blob = Some(seen);
        }
    }
    let mut picked = Vec::new();
    let mut twins = Vec::new();
    for (hash, on_disk) in found {
        let files = [&on_disk.blob, &on_disk.twin];
        let unlinked = files.iter().all(|f| f.as_ref().is_none_or(|f| f.1));
        let touched = files.iter().any(|f| f.as_ref().is_some_and(|f| f.2));
        match (on_disk.blob, on_disk.twin) {
            (Some(blob), twin) if unlinked && touched => {
                picked.push((hash, blob.0, twin.map(|t| t.0)));
            }
            (_, Some((twin, true, true))) => twins.push((hash, twin)),
            _ => {}
        }
    }
    let mut n = 0;
    for (hash, path, twin) in picked {
        vols.store.remove_blob(volume, &hash)?;
        if let Some(twin) = twin
            && let Err(e) = fs::remove_file(&twin)
        {
            tracing::warn!(
                volume,
                hash,
                "could not delete a blob's executable twin: {e}"
            );
        }
        match fs::remove_file(&path) {
            Ok(()) => n += 1,
            Err(e) => tracing::warn!(volume, hash, "could not delete a blob let go: {e}"),
        }
    }
    for (hash, twin) in twins {
        if let Err(e) = fs::remove_file(&twin) {
            tracing::warn!(
                volume,
                hash,
                "could not delete a blob's executable twin: {e}"
            );
        }
    }
    Ok(n)
}
