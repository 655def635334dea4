//! Staged commits: a code snapshot written as its blobs arrive, each new file once, in its
//! place, as `tar -x` writes it.
//!
//! A commit of blobs sent before it writes each new file twice over: once as a blob, named by
//! its hash in the volume's blob folder, then again as a link in the committed tree. A staged
//! commit is told the tree first (`POST /v1/volumes/{name}/stages`), so each pack sent for it
//! (`POST …/blobs/pack?stage={id}`) writes its blobs straight into the tree being built, where
//! no run sees it: a blob's first plain file made and written once, the tree's other files
//! with the same bytes linked to it. The commit (`POST …/stages/{id}/commit`) links in what the
//! volume held already (and what came some other way: large blobs, executable-only ones), moves
//! the tree into place and records each blob written into it with that file as its **home**
//! (`blobs.home`): a later tree links to the home as it would to a blob in the blob folder, and
//! code snapshots' retention keeps a home's blob (in the blob folder) before it removes its
//! tree.
//!
//! Stages live in the server's memory: a server that restarts has none (the folders of an
//! earlier server's are removed when it starts, `volumes::leftovers`), and a client whose
//! stage is gone (404) sends its tree the other way. At most [`MAX_STAGES`] are kept; making
//! one more lets the oldest idle one go.

use std::collections::HashMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use div_api::{CommitTree, CommittedTree, EntryKind, StagedTree, TreeEntry};
use rustix::fs::{Mode, OFlags};

use super::blobs::{locate_blobs, partial_sizes};
use super::error::{CommitError, NoStage, PathRefused, RetentionError, UploadError};
use super::paths::{commit_lock, committed_tree, on_disk, staging, valid_rel};
use super::stages::{MAX_STAGES, PackBlobRef, Stage, State};
use super::tree::{check_place, file_hashes, link_tree, move_into_place};
use super::{Volumes, require_volume};
use crate::fault::StateError;
use crate::rules;
use div_runtime::clock::now_ms;

fn no_stage(volume: &str, id: &str) -> NoStage {
    NoStage {
        volume: volume.to_owned(),
        id: id.to_owned(),
    }
}

/// `POST /v1/volumes/{name}/stages`: checks `tree` as a commit would, and answers which of its
/// blobs the volume lacks, and an id for the packs and the commit that follow.
pub(crate) fn stage_tree(
    vols: &Volumes<'_>,
    volume: &str,
    tree: &CommitTree,
) -> Result<StagedTree, CommitError> {
    require_volume(vols, volume)?;
    if tree.path.is_empty() || !valid_rel(&tree.path) {
        return Err(PathRefused::NoStageThere(tree.path.clone()).into());
    }
    rules::validate_entries(&tree.entries)
        .map_err(|e| CommitError::BadTree(div_api::error_chain(&e)))?;
    let mut entries = tree.entries.clone();
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    let digest = div_api::tree_digest(&entries);
    if let Some((existing, _, _)) = vols.store.tree(volume, &tree.path)?
        && existing != digest
    {
        return Err(CommitError::AnotherTree {
            volume: volume.to_owned(),
            path: tree.path.clone(),
        });
    }
    let hashes = file_hashes(&entries)?;
    let (_, missing) = locate_blobs(vols, volume, &hashes)?;
    let mut wanted: HashMap<String, Vec<usize>> =
        missing.iter().map(|h| (h.clone(), Vec::new())).collect();
    for (i, entry) in entries.iter().enumerate() {
        if entry.kind == EntryKind::File
            && !entry.executable
            && let Some(files) = entry.hash.as_ref().and_then(|h| wanted.get_mut(h))
        {
            files.push(i);
        }
    }
    // A blob that only executable files are is sent to the blob folder as always (its files
    // link to its executable twin there).
    wanted.retain(|_, files| !files.is_empty());
    let partial = partial_sizes(vols, volume, &missing);
    let root = vols.home.volume_dir(volume);
    let dir = staging(vols, volume, &root, "stage")?;
    fs::create_dir(&dir)?;
    let id = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let stage = Arc::new(Stage {
        path: tree.path.clone(),
        digest,
        entries,
        dir,
        made_ms: now_ms(),
        made: Mutex::default(),
        state: Mutex::new(State {
            wanted,
            ..State::default()
        }),
    });
    let mut stages = vols.stages.lock();
    stages.insert((volume.to_owned(), id.clone()), stage);
    // Too many: the oldest that no pack is writing into goes, closed in the same turn of its
    // lock that finds no pack writing (a pack counts itself in, and looks whether the stage
    // is closed, in a turn of that lock too: none writes into a folder being removed).
    while stages.len() > MAX_STAGES {
        let mut idle: Vec<(u64, (String, String))> = stages
            .iter()
            .map(|(key, s)| (s.made_ms, key.clone()))
            .collect();
        idle.sort();
        let gone = idle.into_iter().find_map(|(_, key)| {
            let stage = stages.get(&key)?;
            let mut state = stage.state();
            (state.writing == 0).then(|| {
                state.closed = true;
                key.clone()
            })
        });
        let Some(key) = gone else { break };
        if let Some(gone) = stages.remove(&key) {
            let _ = fs::remove_dir_all(&gone.dir);
        }
    }
    Ok(StagedTree {
        id,
        missing,
        partial,
        extra: Default::default(),
    })
}

/// Writes the blobs of a pack (checked already: each its hash) that the stage `id` wants into
/// its tree: each blob's first plain file made and written, its others linked to it. Answers
/// the blobs it did not want (the volume held them, or another pack wrote them, or only
/// executable files are them), for the caller to store as any pack's, and how many it wrote.
pub(crate) fn write_into_stage<'p, 'b>(
    vols: &Volumes<'_>,
    volume: &str,
    id: &str,
    blobs: &'p [PackBlobRef<'b>],
) -> Result<(Vec<&'p PackBlobRef<'b>>, usize), UploadError> {
    let stage = vols
        .stages
        .get(volume, id)
        .ok_or_else(|| no_stage(volume, id))?;
    // What this pack writes, taken from the stage in one turn of its lock: each blob's
    // files, so no other pack writes them too.
    let mut mine: Vec<(&'b [u8], Vec<usize>)> = Vec::new();
    let mut rest = Vec::new();
    {
        let mut state = stage.state();
        if state.closed {
            return Err(no_stage(volume, id).into());
        }
        for blob in blobs {
            let Some(files) = state.wanted.get(blob.0) else {
                rest.push(blob);
                continue;
            };
            // The tree says what size each of its files is: a blob of another size is not
            // theirs, and nothing of the pack is written.
            if let Some(&i) = files
                .iter()
                .find(|&&i| stage.entries[i].size != blob.1.len() as u64)
            {
                return Err(UploadError::NotTheStagedSize {
                    id: id.to_owned(),
                    path: div_ship::display_path(&stage.entries[i].path).into_owned(),
                    expected: stage.entries[i].size,
                    hash: blob.0.to_owned(),
                    got: blob.1.len(),
                });
            }
        }
        for blob in blobs {
            if let Some(files) = state.wanted.remove(blob.0) {
                mine.push((blob.1, files));
            }
        }
        state.writing += 1;
    }
    let written = write_files(&stage, &mine);
    let mut state = stage.state();
    state.writing -= 1;
    match written {
        Ok(done) => {
            state.written.extend(done);
            Ok((rest, mine.len()))
        }
        Err((done, e)) => {
            // What was written stays; what was not is wanted again.
            let written: std::collections::HashSet<usize> = done.iter().map(|d| d.0).collect();
            state.written.extend(done);
            for (_, files) in mine {
                if !files.iter().any(|i| written.contains(i))
                    && let Some(hash) = stage.entries[files[0]].hash.clone()
                {
                    state.wanted.insert(hash, files);
                }
            }
            Err(StateError::io_while("writing a pack into a staged tree", e).into())
        }
    }
}

/// The umask's bits of `0644`: what a file made with that mode loses (`/proc/self/status`
/// says the umask without changing it, as `umask(2)` would for every thread).
fn umask_strips() -> bool {
    static STRIPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRIPS.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
            })
            .is_none_or(|umask| umask & 0o644 != 0)
    })
}

/// Folders of a stage's tree held open by one pack's writes: the last one written into
/// (the tree's entries are sorted, so one folder's files most often come together), and the
/// last one a file was linked from.
struct Folders<'s> {
    stage: &'s Stage,
    open: [Option<(PathBuf, rustix::fd::OwnedFd)>; 2],
}

impl Folders<'_> {
    /// The folder `rel` (a path in the tree) is in, made if it is not yet (with every folder
    /// above it), opened without following a link, held in slot `slot`.
    fn of(&mut self, rel: &Path, slot: usize) -> std::io::Result<&rustix::fd::OwnedFd> {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let held = &mut self.open[slot];
        if held.as_ref().is_none_or(|(open, _)| open != parent) {
            let at = self.stage.dir.join(parent);
            let made = self
                .stage
                .made
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(parent);
            if !made {
                fs::create_dir_all(&at)?;
                let mut made = self.stage.made.lock().unwrap_or_else(|e| e.into_inner());
                for above in parent.ancestors() {
                    if !made.insert(above.to_owned()) {
                        break;
                    }
                }
            }
            let fd = rustix::fs::open(
                &at,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            *held = Some((parent.to_owned(), fd));
        }
        match held {
            Some((_, fd)) => Ok(fd),
            None => unreachable!("opened just above"),
        }
    }
}

/// Writes each blob of `mine` into the stage's tree: made at its first file (mode `0644`,
/// `O_EXCL`, never through a link) and written whole, then linked at its others. Answers what
/// was written (each file's index, and whether it is its blob's first); on an error, what was
/// written before it, with the error (a blob written in part is removed).
#[allow(clippy::type_complexity)]
fn write_files(
    stage: &Stage,
    mine: &[(&[u8], Vec<usize>)],
) -> Result<Vec<(usize, bool)>, (Vec<(usize, bool)>, std::io::Error)> {
    const WRITTEN: usize = 0;
    const LINKED: usize = 1;
    let mut done = Vec::with_capacity(mine.iter().map(|m| m.1.len()).sum());
    let mut folders = Folders {
        stage,
        open: [None, None],
    };
    let path_of = |i: usize| -> std::io::Result<PathBuf> {
        let rel = on_disk(&stage.entries[i].path).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        if rel.file_name().is_none() {
            return Err(std::io::ErrorKind::InvalidInput.into());
        }
        Ok(rel)
    };
    for (data, files) in mine {
        let first = match path_of(files[0]) {
            Ok(rel) => rel,
            Err(e) => return Err((done, e)),
        };
        let one = (|| -> std::io::Result<()> {
            let name = first.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
            let dir = folders.of(&first, WRITTEN)?;
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )?;
            let mut file = fs::File::from(fd);
            let wrote = file.write_all(data).and_then(|()| {
                if umask_strips() {
                    rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644))?;
                }
                Ok(())
            });
            if let Err(e) = wrote {
                let _ = rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty());
                return Err(e);
            }
            Ok(())
        })();
        if let Err(e) = one {
            return Err((done, e));
        }
        done.push((files[0], true));
        for &i in &files[1..] {
            let linked = (|| -> std::io::Result<()> {
                let rel = path_of(i)?;
                let name = rel.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
                let from_name = first.file_name().ok_or(std::io::ErrorKind::InvalidInput)?;
                // The first file's folder, held in the other slot, while the link's own is
                // made and opened in the first: two folders open at once.
                folders.of(&first, LINKED)?;
                folders.of(&rel, WRITTEN)?;
                let [Some((_, to)), Some((_, from))] = &folders.open else {
                    unreachable!("both opened just above")
                };
                rustix::fs::linkat(from, from_name, to, name, rustix::fs::AtFlags::empty())?;
                Ok(())
            })();
            match linked {
                Ok(()) => done.push((i, false)),
                Err(e) => return Err((done, e)),
            }
        }
    }
    Ok(done)
}

/// The blobs a staged commit wrote into its tree, each with its size and its home (the path in
/// the volume of its first file there), for [`record_homes`].
pub(crate) type Homes = Vec<(String, u64, String)>;

/// `POST /v1/volumes/{name}/stages/{id}/commit`: the staged tree, its other files linked in
/// (blobs the volume holds), moved into place and recorded. The same answers as a commit of
/// the tree (`commit_tree`), and the blobs written into it: the caller records them
/// ([`record_homes`]) after the answer. The stage is gone after it, whatever it answers.
pub(crate) fn commit_stage(
    vols: &Volumes<'_>,
    volume: &str,
    id: &str,
) -> Result<(bool, CommittedTree, Homes), CommitError> {
    let stage = {
        let mut stages = vols.stages.lock();
        let key = (volume.to_owned(), id.to_owned());
        let stage = stages.get(&key).ok_or_else(|| no_stage(volume, id))?;
        let mut state = stage.state();
        if state.writing > 0 {
            return Err(CommitError::StillWriting(id.to_owned()));
        }
        state.closed = true;
        drop(state);
        stages.remove(&key).ok_or_else(|| no_stage(volume, id))?
    };
    let committed = commit_closed(vols, volume, &stage);
    let _ = fs::remove_dir_all(&stage.dir);
    committed
}

fn commit_closed(
    vols: &Volumes<'_>,
    volume: &str,
    stage: &Stage,
) -> Result<(bool, CommittedTree, Homes), CommitError> {
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    require_volume(vols, volume)?;
    let committed = committed_tree(volume, &stage.path, &stage.entries, Some(&stage.digest));
    if let Some((existing, _, _)) = vols.store.tree(volume, &stage.path)? {
        if existing == stage.digest {
            vols.store.touch_tree(volume, &stage.path)?;
            return Ok((false, committed, Homes::new()));
        }
        return Err(CommitError::AnotherTree {
            volume: volume.to_owned(),
            path: stage.path.clone(),
        });
    }
    let written = std::mem::take(&mut stage.state().written);
    let mut done = vec![false; stage.entries.len()];
    for (i, _) in &written {
        done[*i] = true;
    }
    let rest: Vec<TreeEntry> = stage
        .entries
        .iter()
        .zip(&done)
        .filter(|(_, done)| !**done)
        .map(|(e, _)| e.clone())
        .collect();
    let hashes: Vec<&str> = rest
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .filter_map(|e| e.hash.as_deref())
        .collect();
    let (sources, missing) = locate_blobs(vols, volume, &hashes)?;
    if !missing.is_empty() {
        return Err(CommitError::NotSent(missing));
    }
    check_place(vols, volume, &stage.path)?;
    link_tree(vols, volume, &rest, &sources, &stage.dir)?;
    move_into_place(vols, volume, &stage.path, &stage.dir)?;
    vols.store.add_tree(
        volume,
        &stage.path,
        &stage.digest,
        committed.files,
        committed.bytes,
    )?;
    let homes: Homes = written
        .iter()
        .filter(|(_, first)| *first)
        .filter_map(|&(i, _)| {
            let entry = &stage.entries[i];
            Some((
                entry.hash.clone()?,
                entry.size,
                format!("{}/{}", stage.path, entry.path),
            ))
        })
        .collect();
    Ok((true, committed, homes))
}

/// Records the blobs a staged commit wrote into the tree at `path` ([`commit_stage`]), each
/// living at its home there, after the commit was answered: a big tree's 57,000 records took
/// 90 ms, longer than the rest of its commit. Until they are, a tree sent meanwhile has those
/// blobs sent again (and keeps its own copy). In transactions of 1,024 records, a millisecond
/// apart, never holding the store (one connection) nor the volume's commit lock for long:
/// placing the run that follows the commit needs both, and waited the whole 90 ms when the
/// records were made in one turn of them (and as long when the transactions followed each
/// other at once: a lock let go and taken again at once is seldom another's in between).
///
/// Should retention remove the tree meanwhile (it keeps a tree committed this recently, so
/// only in principle), no record may point into it: once they are all made, the tree is
/// looked for, and if it is gone (its record goes first, in a turn of the commit lock), the
/// records still homed in it are removed in a turn of that lock. Retention, which removes or
/// rehomes the records it finds homed in a tree after removing its record, has either found
/// them, or they are removed here.
pub(crate) fn record_homes(
    vols: &Volumes<'_>,
    volume: &str,
    path: &str,
    digest: &str,
    homes: &Homes,
) -> Result<(), RetentionError> {
    for (i, some) in homes.chunks(1024).enumerate() {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        vols.store.add_homed_blobs(volume, some)?;
    }
    let still = |vols: &Volumes<'_>| -> Result<bool, RetentionError> {
        Ok(vols
            .store
            .tree(volume, path)?
            .is_some_and(|(held, _, _)| held == digest))
    };
    if homes.is_empty() || still(vols)? {
        return Ok(());
    }
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    if !still(vols)? {
        for (hash, _) in vols.store.blobs_homed_in(volume, path)? {
            vols.store.remove_blob(volume, &hash)?;
        }
    }
    Ok(())
}
