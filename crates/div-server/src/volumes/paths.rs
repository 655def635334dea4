//! What every volume operation leans on: names and paths checked, a path of a tree on disk,
//! the commit lock, a new name for what the server writes, a commit's answer.

use std::fs;
use std::path::{Path, PathBuf};

use div_api::CommittedTree;

use super::Volumes;
use super::error::PathRefused;
use div_runtime::clock::now_ms;

/// Where each blob a tree links is on disk: in the volume's blob folder, or as the file of a
/// committed tree that is its home (`volumes::stage`), keyed by hash.
pub(crate) type Sources = std::collections::HashMap<String, PathBuf>;

pub(crate) fn valid_hash(hash: &str) -> bool {
    hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A path inside a volume (div-spec's rule), or `""` for its root. A name that is not UTF-8
/// comes escaped ([`div_ship::encode_path`]: a NUL and two hex digits a byte); a NUL that is
/// not such an escape is refused.
pub(super) fn valid_rel(path: &str) -> bool {
    path.is_empty()
        || (div_ship::decode_path(path).is_some()
            && div_spec::is_volume_path(&path.replace('\0', "%")))
}

/// A path of a tree (escaped as [`div_ship::encode_path`] writes it) on disk, relative.
pub(super) fn on_disk(path: &str) -> Result<PathBuf, PathRefused> {
    div_ship::fs_path(path)
        .map(std::borrow::Cow::into_owned)
        .ok_or_else(|| PathRefused::NotValid(path.to_owned()))
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

/// A name no other in this server's life has had: `PREFIX-PID-MS-N`, for what the server
/// writes in a volume's blob folder (or beside its files, under `.tmp-`) on its way in or out.
pub(super) fn unique_name(prefix: &str) -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        now_ms(),
        MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Where a tree is written before it is moved into the volume: a new path in the volume's
/// blob folder, which no run sees, when it is on the volume's filesystem (a rename cannot
/// cross filesystems); else beside the volume's files (`.tmp-put-…`, left out of listings),
/// as before.
pub(super) fn staging(
    vols: &Volumes<'_>,
    volume: &str,
    root: &Path,
    prefix: &str,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let name = unique_name(prefix);
    let blobs = vols.home.blob_dir(volume);
    fs::create_dir_all(&blobs)?;
    let same_disk = fs::metadata(&blobs)?.dev() == fs::metadata(root)?.dev();
    Ok(if same_disk {
        blobs.join(name)
    } else {
        root.join(format!(".tmp-{name}"))
    })
}

/// What a commit of `entries` at `path` in `volume` says: how many files, how many bytes.
pub(super) fn committed_tree(
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
