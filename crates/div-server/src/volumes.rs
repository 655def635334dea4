//! Volumes: content-addressed blobs (kept outside the volume's directory), resumable and
//! verified uploads, committed trees, listings and file reads.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use div_api::{CommitTree, CommittedTree, Volume, VolumeEntry};
use serde_json::json;

use crate::error::HttpError;
use crate::rules;
use crate::server::Server;
use div_runtime::clock::{self, now_ms};
use div_runtime::disk;

mod beneath;
mod blobs;
pub(crate) mod leftovers;
pub(crate) mod retention;
pub(crate) mod stage;

pub(crate) use blobs::{finish_upload, missing_blobs, store_pack};
pub(crate) use stage::{Stages, commit_stage, stage_tree};

use beneath::{folder_beneath, holds, open_in, place, split};

pub(crate) fn blob_dir(server: &Server, volume: &str) -> PathBuf {
    server.home.join("blobs").join(volume)
}

pub(crate) fn blob_path(server: &Server, volume: &str, hash: &str) -> PathBuf {
    blob_dir(server, volume).join(hash)
}

pub(crate) fn partial_path(server: &Server, volume: &str, hash: &str) -> PathBuf {
    blob_dir(server, volume).join("partial").join(hash)
}

/// Which of `hashes` the volume holds (one that is not a blob's hash never is).
pub(crate) fn held_blobs<'h>(
    server: &Server,
    volume: &str,
    hashes: &[&'h str],
) -> Result<std::collections::HashSet<&'h str>, HttpError> {
    let valid: Vec<&str> = hashes.iter().copied().filter(|h| valid_hash(h)).collect();
    let held = server.store.has_blobs(volume, &valid)?;
    Ok(valid
        .into_iter()
        .zip(held)
        .filter_map(|(hash, held)| held.then_some(hash))
        .collect())
}

/// Where each blob a tree links is on disk: in the volume's blob folder, or as the file of a
/// committed tree that is its home (`volumes::stage`), keyed by hash.
pub(crate) type Sources = std::collections::HashMap<String, PathBuf>;

/// Where the volume holds each of `hashes` ([`Sources`]), and the ones it lacks, each once,
/// in the order asked (one that is not a blob's hash never is held).
pub(crate) fn locate_blobs(
    server: &Server,
    volume: &str,
    hashes: &[&str],
) -> Result<(Sources, Vec<String>), HttpError> {
    let valid: Vec<&str> = hashes.iter().copied().filter(|h| valid_hash(h)).collect();
    // A volume that holds no blob (a project's first ship) is not asked about each.
    let homes = if server.store.holds_blobs(volume)? {
        server.store.blob_homes(volume, &valid)?
    } else {
        vec![None; valid.len()]
    };
    let mut sources = Sources::with_capacity(valid.len());
    for (hash, home) in valid.into_iter().zip(homes) {
        let at = match home {
            None => continue,
            Some(None) => blob_path(server, volume, hash),
            Some(Some(home)) => server.volume_dir(volume).join(on_disk(&home)?),
        };
        sources.insert(hash.to_owned(), at);
    }
    let mut missing = Vec::new();
    let mut named = std::collections::HashSet::new();
    for hash in hashes {
        if !sources.contains_key(*hash) && named.insert(*hash) {
            missing.push((*hash).to_owned());
        }
    }
    Ok((sources, missing))
}

/// The hash of each file of a tree, in its order; a file without one refuses the tree.
fn file_hashes(entries: &[div_api::TreeEntry]) -> Result<Vec<&str>, HttpError> {
    let mut hashes = Vec::new();
    for entry in entries {
        if entry.kind != div_api::EntryKind::File {
            continue;
        }
        let Some(hash) = &entry.hash else {
            return Err(HttpError::invalid(format!(
                "the file `{}` has no hash",
                entry.path
            )));
        };
        hashes.push(hash.as_str());
    }
    Ok(hashes)
}

/// A commit refused for blobs of its tree that the volume lacks (`details.missing`).
fn not_sent(missing: Vec<String>) -> HttpError {
    HttpError::invalid(format!(
        "{} blob(s) of the tree were not sent",
        missing.len()
    ))
    .with_details(json!({ "missing": missing }))
}

/// Where the blob `hash` is, as `sources` found it (in the blob folder where they did not).
fn source(server: &Server, volume: &str, sources: &Sources, hash: &str) -> PathBuf {
    sources
        .get(hash)
        .cloned()
        .unwrap_or_else(|| blob_path(server, volume, hash))
}

/// Writes `entries` into the folder `dir` (which exists), each file a hard link to its blob
/// where `sources` found it or, executable, to the blob's executable twin, which lives in the
/// blob folder whoever is the blob's home (div-ship's `link_into`): a committed tree is
/// never written again, so a file is stored once however many trees hold it.
fn link_tree(
    server: &Server,
    volume: &str,
    entries: &[div_api::TreeEntry],
    sources: &Sources,
    dir: &Path,
) -> Result<(), HttpError> {
    rules::link_into(
        entries,
        |h| source(server, volume, sources, h),
        |h| {
            let mut twin = blob_path(server, volume, h).into_os_string();
            twin.push(div_ship::EXECUTABLE_TWIN_SUFFIX);
            PathBuf::from(twin)
        },
        dir,
    )
    .map_err(HttpError::invalid)
}

/// How many bytes of each of `missing` a partial upload holds, where one holds any. The
/// partial uploads there are are read once (a cold ship asks about every file, and there are
/// seldom any): a question for each was a failed `stat` for each.
pub(crate) fn partial_sizes(
    server: &Server,
    volume: &str,
    missing: &[String],
) -> std::collections::BTreeMap<String, u64> {
    let partials: std::collections::HashSet<String> =
        fs::read_dir(blob_dir(server, volume).join("partial"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
    let mut partial = std::collections::BTreeMap::new();
    if partials.is_empty() {
        return partial;
    }
    for hash in missing {
        if valid_hash(hash)
            && partials.contains(hash)
            && let Ok(m) = fs::metadata(partial_path(server, volume, hash))
            && m.len() > 0
        {
            partial.insert(hash.clone(), m.len());
        }
    }
    partial
}

pub(crate) fn valid_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A path inside a volume (div-spec's rule), or `""` for its root. A name that is not UTF-8
/// comes escaped ([`div_ship::encode_path`]: a NUL and two hex digits a byte); a NUL that is
/// not such an escape is refused.
fn valid_rel(path: &str) -> bool {
    path.is_empty()
        || (div_ship::decode_path(path).is_some()
            && div_spec::is_volume_path(&path.replace('\0', "%")))
}

pub(crate) fn require_volume(server: &Server, name: &str) -> Result<Volume, HttpError> {
    server
        .store
        .volume(name)?
        .ok_or_else(|| HttpError::not_found(format!("no volume `{name}`")))
}

fn with_size(server: &Server, mut v: Volume) -> Volume {
    v.size_bytes = disk::tree_bytes(&server.volume_dir(&v.name));
    v
}

/// A volume's name as a route gives it, or 422 with the rule. Volume names have been held
/// to it since the first server (a volume is made only by `POST /v1/volumes`, which always
/// checked it), so no stored volume is refused by this.
pub(crate) fn check_name(name: &str) -> Result<(), HttpError> {
    rules::check_volume_name(name).map_err(HttpError::invalid)
}

pub(crate) fn create_volume(server: &Server, name: &str) -> Result<(u16, Volume), HttpError> {
    check_name(name)?;
    let created = server.store.create_volume(name, &clock::now_rfc3339())?;
    fs::create_dir_all(server.volume_dir(name))?;
    let volume = require_volume(server, name)?;
    Ok((if created { 201 } else { 200 }, with_size(server, volume)))
}

pub(crate) fn list_volumes(server: &Server) -> Result<Vec<Volume>, HttpError> {
    Ok(server
        .store
        .volumes()?
        .into_iter()
        .map(|v| with_size(server, v))
        .collect())
}

pub(crate) fn delete_volume(server: &Server, name: &str) -> Result<(), HttpError> {
    if !server.store.delete_volume(name)? {
        return Err(HttpError::not_found(format!("no volume `{name}`")));
    }
    let _ = fs::remove_dir_all(server.volume_dir(name));
    let _ = fs::remove_dir_all(blob_dir(server, name));
    Ok(())
}

/// Commits of one volume take turns (one lock per volume name, for the life of the process):
/// two clients committing the same new tree at the same `code/<id>` at the same instant used
/// to both pass the "not there yet" checks, both write the tree, and the second rename onto
/// the snapshot the first had just made failed with "Directory not empty" (issue 13). In turn,
/// the second finds the first's record and answers 200; two root puts likewise never write
/// one path together.
pub(crate) fn commit_lock(volume: &str) -> std::sync::Arc<std::sync::Mutex<()>> {
    static LOCKS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<std::sync::Mutex<()>>>>,
    > = std::sync::OnceLock::new();
    let mut map = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    std::sync::Arc::clone(map.entry(volume.to_owned()).or_default())
}

pub(crate) fn commit_tree(
    server: &Server,
    volume: &str,
    tree: &CommitTree,
) -> Result<(u16, CommittedTree), HttpError> {
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    require_volume(server, volume)?;
    if !valid_rel(&tree.path) {
        return Err(HttpError::invalid(format!(
            "`{}` is not a path inside the volume",
            tree.path
        )));
    }
    rules::validate_entries(&tree.entries).map_err(HttpError::invalid)?;
    let mut entries = tree.entries.clone();
    entries.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    // The same tree committed before at the same path (an unchanged project's next run):
    // known at once, without asking the store about each of its blobs again (they were
    // all there when it was first committed, and blobs are never taken back while a tree
    // names them).
    let digest = (!tree.path.is_empty()).then(|| div_api::tree_digest(&entries));
    if let Some(digest) = &digest
        && let Some((existing, _, _)) = server.store.tree(volume, &tree.path)?
        && existing == *digest
    {
        server.store.touch_tree(volume, &tree.path)?;
        return Ok((
            200,
            committed_tree(volume, &tree.path, &entries, Some(digest)),
        ));
    }
    let hashes = file_hashes(&tree.entries)?;
    let (sources, missing) = locate_blobs(server, volume, &hashes)?;
    if !missing.is_empty() {
        return Err(not_sent(missing));
    }
    let Some(digest) = digest else {
        return add_to_root(server, volume, &entries, &sources);
    };
    let committed = committed_tree(volume, &tree.path, &entries, Some(&digest));
    if let Some((existing, _, _)) = server.store.tree(volume, &tree.path)? {
        if existing == digest {
            return Ok((200, committed));
        }
        return Err(HttpError::conflict(format!(
            "`{}` in volume `{volume}` holds another tree",
            tree.path
        )));
    }
    check_place(server, volume, &tree.path)?;
    // Written whole where no run sees it, then moved into place.
    let root = server.volume_dir(volume);
    let tmp = staging(server, volume, &root, "put")?;
    // A tree committed at a path is never written again (a run sees it read-only, a put into
    // it is refused): its files are its blobs, linked, so a file is stored once however many
    // trees hold it.
    let placed = fs::create_dir(&tmp)
        .map_err(HttpError::from)
        .and_then(|()| link_tree(server, volume, &entries, &sources, &tmp))
        .and_then(|()| move_into_place(server, volume, &tree.path, &tmp));
    let _ = fs::remove_dir_all(&tmp);
    placed?;
    server.store.add_tree(
        volume,
        &tree.path,
        &digest,
        committed.files,
        committed.bytes,
    )?;
    Ok((201, committed))
}

/// Refuses a commit at `path` where something is already (409), or where a folder on the
/// way is not a folder: a link there (a run can leave one in a volume: `code` → /etc) would
/// carry the commit out of the volume.
fn check_place(server: &Server, volume: &str, path: &str) -> Result<(), HttpError> {
    let dest = server.volume_dir(volume).join(path);
    if fs::symlink_metadata(&dest).is_ok() {
        return Err(HttpError::conflict(format!(
            "`{path}` already exists in volume `{volume}`"
        )));
    }
    let parts: Vec<&str> = path.split('/').collect();
    for depth in 1..parts.len() {
        let above = parts[..depth].join("/");
        if fs::symlink_metadata(server.volume_dir(volume).join(&above)).is_ok_and(|m| !m.is_dir()) {
            return Err(HttpError::conflict(format!(
                "`{above}` in volume `{volume}` is not a folder (a link or a file left there, perhaps by a run); remove it to commit `{path}`"
            )));
        }
    }
    Ok(())
}

/// Moves the tree written whole at `tmp` (where no run sees it) to `path` in the volume,
/// beneath folders opened without following links (made when missing), never over anything:
/// a folder a run swaps for a link meanwhile refuses the commit instead of carrying it out of
/// the volume. The caller holds the volume's commit lock.
fn move_into_place(server: &Server, volume: &str, path: &str, tmp: &Path) -> Result<(), HttpError> {
    let root = server.volume_dir(volume);
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

/// A tree committed at `""` (what `div storage put` sends) is put into the volume's root as
/// `cp` would: each path the volume lacks is written, each it holds is replaced (a file a run
/// edited, or a link a run left there: the link itself, never what it points to), and one it
/// holds with the same content is left as it is. A folder where the tree has a file, and a
/// file or a link where the tree needs a folder, refuse the whole commit, 409, naming the
/// path, before anything is written: a put never writes through a link, and never replaces a
/// folder. Paths that are not UTF-8 come escaped ([`div_ship::encode_path`]).
///
/// Everything is written beside the volume first (in its blob folder, which no run sees),
/// then each file is renamed into place beneath folders opened one at a time without
/// following links, so a run that swaps a folder for a link meanwhile gets the put refused,
/// never written through.
fn add_to_root(
    server: &Server,
    volume: &str,
    entries: &[div_api::TreeEntry],
    sources: &Sources,
) -> Result<(u16, CommittedTree), HttpError> {
    let root = server.volume_dir(volume);
    let refuse = |path: &str, why: &str| {
        HttpError::conflict(format!(
            "`{}` in volume `{volume}` {why}",
            div_ship::display_path(path)
        ))
        .with_details(json!({ "path": path }))
    };
    let mut write = Vec::new();
    for entry in entries {
        let parts: Vec<&str> = entry.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            match fs::symlink_metadata(root.join(on_disk(&above)?)) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(refuse(
                        &above,
                        "is a link (a run may have left it), where the put has a folder; a put never writes through a link",
                    ));
                }
                Ok(m) if !m.is_dir() => {
                    return Err(refuse(
                        &above,
                        "is a file, where the put has a folder; a put replaces files, never a file with a folder",
                    ));
                }
                _ => {}
            }
        }
        match fs::symlink_metadata(root.join(on_disk(&entry.path)?)) {
            Err(_) => write.push(entry.clone()),
            Ok(m) if m.is_dir() => {
                return Err(refuse(
                    &entry.path,
                    "is a folder, where the put has a file; a put replaces files, never a folder",
                ));
            }
            Ok(_) if holds(&root, entry) => {}
            Ok(_) => write.push(entry.clone()),
        }
    }
    // A committed tree (a code snapshot, `code/<id>`) never changes: what a run was given
    // stays what that id names. Writing into one is refused, whole, naming it.
    let mut committed_at: std::collections::HashMap<String, bool> = Default::default();
    for entry in &write {
        let parts: Vec<&str> = entry.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            let is_tree = match committed_at.get(&above) {
                Some(known) => *known,
                None => {
                    let known = server.store.tree(volume, &above)?.is_some();
                    committed_at.insert(above.clone(), known);
                    known
                }
            };
            if is_tree {
                return Err(refuse(
                    &entry.path,
                    &format!(
                        "is in the committed tree `{}`, which never changes (runs were given it by its id); put it under another `--to`",
                        div_ship::display_path(&above)
                    ),
                ));
            }
        }
    }
    let committed = committed_tree(volume, "", entries, None);
    if write.is_empty() {
        return Ok((200, committed));
    }
    let tmp = staging(server, volume, &root, "put")?;
    let placed = rules::materialise(&write, |h| source(server, volume, sources, h), &tmp)
        .map_err(HttpError::invalid)
        .and_then(|()| {
            for entry in &write {
                place(&root, &tmp, &entry.path).map_err(|e| match e.raw_os_error() {
                    Some(libc::ELOOP | libc::ENOTDIR | libc::EISDIR | libc::ENOTEMPTY) => refuse(
                        &entry.path,
                        "changed while the put was written (a folder on its way became a link or a file, or the file a folder); nothing more was written",
                    ),
                    _ => HttpError::from(e),
                })?;
            }
            Ok(())
        });
    let _ = fs::remove_dir_all(&tmp);
    placed?;
    Ok((201, committed))
}

/// Where a tree is written before it is moved into the volume: a new path in the volume's
/// blob folder, which no run sees, when it is on the volume's filesystem (a rename cannot
/// cross filesystems); else beside the volume's files (`.tmp-put-…`, left out of listings),
/// as before.
fn staging(server: &Server, volume: &str, root: &Path, prefix: &str) -> Result<PathBuf, HttpError> {
    use std::os::unix::fs::MetadataExt;
    let name = unique_name(prefix);
    let blobs = blob_dir(server, volume);
    fs::create_dir_all(&blobs)?;
    let same_disk = fs::metadata(&blobs)?.dev() == fs::metadata(root)?.dev();
    Ok(if same_disk {
        blobs.join(name)
    } else {
        root.join(format!(".tmp-{name}"))
    })
}

/// A name no other in this server's life has had: `PREFIX-PID-MS-N`, for what the server
/// writes in a volume's blob folder (or beside its files, under `.tmp-`) on its way in or out.
fn unique_name(prefix: &str) -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        now_ms(),
        MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// A commit's place that could not be reached: a link or a file on its way, or something
/// already there (a run may have made it since it was checked); other errors as they are.
fn on_the_way(volume: &str, path: &str, e: std::io::Error) -> HttpError {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR | libc::EEXIST | libc::ENOTEMPTY) => {
            HttpError::conflict(format!(
                "`{path}` in volume `{volume}` could not be written: a folder on its way is a link or a file, or something is already there (a run may have left it); remove it to commit `{path}`"
            ))
        }
        _ => HttpError::from(e),
    }
}

/// A path of a tree (escaped as [`div_ship::encode_path`] writes it) on disk, relative.
fn on_disk(path: &str) -> Result<PathBuf, HttpError> {
    div_ship::fs_path(path)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| HttpError::invalid(format!("`{}` is not a valid path", path.escape_debug())))
}

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
    server: &Server,
    volume: &str,
    path: &str,
) -> Result<Vec<VolumeEntry>, HttpError> {
    require_volume(server, volume)?;
    if !valid_rel(path) {
        return Err(HttpError::invalid(format!(
            "`{path}` is not a path inside the volume"
        )));
    }
    let root = server.volume_dir(volume);
    let at = root.join(on_disk(path)?);
    let meta = fs::symlink_metadata(&at)
        .map_err(|_| HttpError::not_found(format!("no `{path}` in volume `{volume}`")))?;
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

/// What a commit of `entries` at `path` in `volume` says: how many files, how many bytes.
fn committed_tree(
    volume: &str,
    path: &str,
    entries: &[div_api::TreeEntry],
    digest: Option<&str>,
) -> CommittedTree {
    CommittedTree {
        digest: digest.map(str::to_owned),
        volume: volume.to_owned(),
        path: path.to_owned(),
        files: entries
            .iter()
            .filter(|e| e.kind == div_api::EntryKind::File)
            .count() as u64,
        bytes: entries.iter().map(|e| e.size).sum(),
        extra: Default::default(),
    }
}

/// `GET /v1/volumes/{name}/trees?path=P&digest=D`: the tree committed at `P` when its digest
/// is `D` (`div_api::tree_digest`), else `404 not_found`. What lets an unchanged project's
/// next run skip sending its hashes and its tree.
pub(crate) fn tree_held(
    server: &Server,
    volume: &str,
    path: &str,
    digest: &str,
) -> Result<CommittedTree, HttpError> {
    require_volume(server, volume)?;
    if path.is_empty() || !valid_rel(path) {
        return Err(HttpError::invalid(format!(
            "`{path}` is not a path inside the volume where a tree can be"
        )));
    }
    match server.store.tree(volume, path)? {
        Some((held, files, bytes)) if held == digest => {
            server.store.touch_tree(volume, path)?;
            Ok(CommittedTree {
                volume: volume.to_owned(),
                path: path.to_owned(),
                files,
                bytes,
                digest: Some(held),
                extra: Default::default(),
            })
        }
        Some(_) => Err(HttpError::not_found(format!(
            "`{path}` in volume `{volume}` holds another tree"
        ))),
        None => Err(HttpError::not_found(format!(
            "no tree is committed at `{path}` in volume `{volume}`"
        ))),
    }
}

/// A file of a volume, opened for reading: links inside the volume are resolved (one that
/// leaves it, or anything but a regular file, is "no file"), then the resolved path is opened
/// beneath the volume one folder at a time without following a link, the file itself
/// `O_NOFOLLOW | O_NONBLOCK`: a run that swaps the file or a folder for a link (to a host
/// file) or a FIFO after the path was resolved gets "no file", never the host's file nor a
/// read that blocks.
pub(crate) fn open_file(server: &Server, volume: &str, path: &str) -> Result<fs::File, HttpError> {
    require_volume(server, volume)?;
    if path.is_empty() || !valid_rel(path) {
        return Err(HttpError::invalid(format!(
            "`{path}` is not a path inside the volume"
        )));
    }
    let root = server.volume_dir(volume).canonicalize()?;
    let not_found = || {
        HttpError::not_found(format!(
            "no file `{}` in volume `{volume}`",
            div_ship::display_path(path)
        ))
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
        Err(e) => Err(HttpError::from(e)),
    }
}
