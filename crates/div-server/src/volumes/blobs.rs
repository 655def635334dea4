//! A volume's blobs: which of a shipment's the volume holds and where, and a resumable
//! upload finished and checked; [`write_new`] makes a blob under its name, whole or not at all.

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use div_api::MissingBlobs;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::error::{LookupError, PathRefused, UploadError};
use super::paths::{Sources, commit_lock, on_disk, valid_hash};
use super::{Volumes, require_volume};

/// Which of `hashes` the volume lacks, and how much of each a partial upload holds.
pub(crate) fn missing_blobs(
    vols: &Volumes<'_>,
    volume: &str,
    hashes: &[String],
) -> Result<MissingBlobs, UploadError> {
    require_volume(vols, volume)?;
    let mut missing = Vec::new();
    let mut seen = BTreeSet::new();
    let asked: Vec<&str> = hashes
        .iter()
        .filter(|h| seen.insert(h.as_str()))
        .map(String::as_str)
        .collect();
    let held = held_blobs(vols, volume, &asked)?;
    for hash in asked {
        if !held.contains(hash) {
            missing.push(hash.to_owned());
        }
    }
    let partial = partial_sizes(vols, volume, &missing);
    Ok(MissingBlobs {
        missing,
        partial,
        extra: Default::default(),
    })
}

/// Before bytes are appended to the partial upload of `hash`: whether the volume holds the
/// blob already, and where its partial upload is (its folder made).
pub(crate) fn begin_upload(
    vols: &Volumes<'_>,
    volume: &str,
    hash: &str,
) -> Result<(bool, PathBuf), LookupError> {
    require_volume(vols, volume)?;
    fs::create_dir_all(vols.home.blob_dir(volume).join("partial"))?;
    Ok((
        vols.store.has_blob(volume, hash)?,
        vols.home.partial_path(volume, hash),
    ))
}

/// After bytes were appended to a partial upload: whole and right (201), whole and wrong
/// (422, discarded), too long (422, discarded), or still partial (204).
pub(crate) fn finish_upload(
    vols: &Volumes<'_>,
    volume: &str,
    hash: &str,
    total: u64,
) -> Result<u16, UploadError> {
    let partial = vols.home.partial_path(volume, hash);
    let size = fs::metadata(&partial).map_or(0, |m| m.len());
    if size > total {
        let _ = fs::remove_file(&partial);
        return Err(UploadError::LongerThanItsTotal {
            hash: hash.to_owned(),
            size,
            total,
        });
    }
    if size < total {
        return Ok(204);
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(fs::File::open(&partial)?)?;
    let got = hasher.finalize().to_hex().to_string();
    if got != hash {
        let _ = fs::remove_file(&partial);
        return Err(UploadError::HashMismatch {
            expected: hash.to_owned(),
            actual: got,
            kept: "the partial upload was discarded",
        });
    }
    // In a turn of the commit lock, as a pack's write over a name is (`store_pack`).
    let lock = commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    fs::rename(&partial, vols.home.blob_path(volume, hash))?;
    vols.store.add_blob(volume, hash, total)?;
    Ok(201)
}

/// Which of `hashes` the volume holds (one that is not a blob's hash never is).
pub(super) fn held_blobs<'h>(
    vols: &Volumes<'_>,
    volume: &str,
    hashes: &[&'h str],
) -> Result<std::collections::HashSet<&'h str>, LookupError> {
    let valid: Vec<&str> = hashes.iter().copied().filter(|h| valid_hash(h)).collect();
    let held = vols.store.has_blobs(volume, &valid)?;
    Ok(valid
        .into_iter()
        .zip(held)
        .filter_map(|(hash, held)| held.then_some(hash))
        .collect())
}

/// Where the volume holds each of `hashes` ([`Sources`]), and the ones it lacks, each once,
/// in the order asked (one that is not a blob's hash never is held).
pub(super) fn locate_blobs(
    vols: &Volumes<'_>,
    volume: &str,
    hashes: &[&str],
) -> Result<(Sources, Vec<String>), Located> {
    let valid: Vec<&str> = hashes.iter().copied().filter(|h| valid_hash(h)).collect();
    // A volume that holds no blob (a project's first ship) is not asked about each.
    let homes = if vols.store.holds_blobs(volume)? {
        vols.store.blob_homes(volume, &valid)?
    } else {
        vec![None; valid.len()]
    };
    let mut sources = Sources::with_capacity(valid.len());
    for (hash, home) in valid.into_iter().zip(homes) {
        let at = match home {
            None => continue,
            Some(None) => vols.home.blob_path(volume, hash),
            Some(Some(home)) => vols.home.volume_dir(volume).join(on_disk(&home)?),
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

/// The error of [`locate_blobs`]: the store failed, or a blob's home is a path that does not
/// decode.
#[derive(Debug, thiserror::Error)]
pub(super) enum Located {
    #[error(transparent)]
    Lookup(#[from] LookupError),
    #[error(transparent)]
    Path(#[from] PathRefused),
}

impl From<crate::store::StoreError> for Located {
    fn from(e: crate::store::StoreError) -> Located {
        Located::Lookup(e.into())
    }
}

impl From<Located> for super::CommitError {
    fn from(e: Located) -> super::CommitError {
        match e {
            Located::Lookup(e) => e.into(),
            Located::Path(e) => e.into(),
        }
    }
}

/// Where the blob `hash` is, as `sources` found it (in the blob folder where they did not).
pub(super) fn source(vols: &Volumes<'_>, volume: &str, sources: &Sources, hash: &str) -> PathBuf {
    sources
        .get(hash)
        .cloned()
        .unwrap_or_else(|| vols.home.blob_path(volume, hash))
}

/// How many bytes of each of `missing` a partial upload holds, where one holds any. The
/// partial uploads there are are read once (a cold ship asks about every file, and there are
/// seldom any): a question for each was a failed `stat` for each.
pub(super) fn partial_sizes(
    vols: &Volumes<'_>,
    volume: &str,
    missing: &[String],
) -> std::collections::BTreeMap<String, u64> {
    let partials: std::collections::HashSet<String> =
        fs::read_dir(vols.home.blob_dir(volume).join("partial"))
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
            && let Ok(m) = fs::metadata(vols.home.partial_path(volume, hash))
            && m.len() > 0
        {
            partial.insert(hash.clone(), m.len());
        }
    }
    partial
}

/// Writes `data` as the blob `hash` in the blob folder `blobs`: written whole into a file
/// with no name (`O_TMPFILE`), then linked under its name, which `linkat(2)` never puts over
/// anything. So a blob's name only ever holds a whole file, whoever looks and whenever (a
/// file made under its name and then written would be seen part-written, and a write that
/// failed and removed its name could remove a whole one another pack had put there meanwhile;
/// `hostile::packs_of_one_new_blob_sent_at_once_leave_it_whole`). One name made and nothing
/// renamed, as `tar -x` makes a file. `Ok(false)` when anything is already at that name (a
/// blob another pack has written, or a file put there by hand) or the folder's file system
/// cannot make a file with no name: the caller writes it the other way, beside it and
/// renamed over it. A write that fails leaves nothing: the unnamed file goes with its
/// descriptor.
pub(super) fn write_new(blobs: &OwnedFd, hash: &str, data: &[u8]) -> std::io::Result<bool> {
    use std::io::Write;
    let fd = match rustix::fs::openat(
        blobs,
        ".",
        OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    ) {
        Ok(fd) => fd,
        // The file system makes no file without a name (`EOPNOTSUPP`, or `EISDIR` from a
        // kernel that does not know the flag).
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let mut file = fs::File::from(fd);
    file.write_all(data)?;
    let linked = div_ship::name_unnamed_file(&file, blobs, std::ffi::OsStr::new(hash));
    match linked {
        Ok(()) => Ok(true),
        Err(Errno::EXIST | Errno::NOENT | Errno::PERM | Errno::XDEV) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(dir: &std::path::Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    /// Written whole under its name, with nothing else left in the folder; where anything is
    /// at the name already (a file, a link), it is left as it is and the caller is told to
    /// write the other way.
    #[test]
    fn a_new_blob_is_written_under_its_name_and_never_over_anything() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = folder(tmp.path());
        let data = vec![7u8; 300_000];
        assert!(write_new(&dir, "aa", &data).unwrap());
        assert_eq!(fs::read(tmp.path().join("aa")).unwrap(), data);
        let names: Vec<_> = fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["aa"]);
        fs::write(tmp.path().join("bb"), "there before").unwrap();
        assert!(!write_new(&dir, "bb", b"new").unwrap());
        assert_eq!(fs::read(tmp.path().join("bb")).unwrap(), b"there before");
        let outside = tmp.path().join("outside");
        fs::write(&outside, "not a blob").unwrap();
        std::os::unix::fs::symlink(&outside, tmp.path().join("cc")).unwrap();
        assert!(!write_new(&dir, "cc", b"new").unwrap());
        assert_eq!(fs::read(&outside).unwrap(), b"not a blob");
    }
}
