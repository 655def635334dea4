//! A volume's blobs: which of a shipment's the volume lacks, a resumable upload finished and
//! checked, and packs of small whole blobs.

use std::collections::BTreeSet;
use std::fs;
use std::os::fd::OwnedFd;

use div_api::MissingBlobs;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use serde_json::json;

use super::{blob_dir, blob_path, partial_path, require_volume};
use crate::error::{ErrorCode, HttpError};
use crate::server::Server;

pub(crate) fn missing_blobs(
    server: &Server,
    volume: &str,
    hashes: &[String],
) -> Result<MissingBlobs, HttpError> {
    require_volume(server, volume)?;
    let mut missing = Vec::new();
    let mut seen = BTreeSet::new();
    let asked: Vec<&str> = hashes
        .iter()
        .filter(|h| seen.insert(h.as_str()))
        .map(String::as_str)
        .collect();
    let held = super::held_blobs(server, volume, &asked)?;
    for hash in asked {
        if !held.contains(hash) {
            missing.push(hash.to_owned());
        }
    }
    let partial = super::partial_sizes(server, volume, &missing);
    Ok(MissingBlobs {
        missing,
        partial,
        extra: Default::default(),
    })
}

/// After bytes were appended to a partial upload: whole and right (201), whole and wrong
/// (422, discarded), too long (422, discarded), or still partial (204).
pub(crate) fn finish_upload(
    server: &Server,
    volume: &str,
    hash: &str,
    total: u64,
) -> Result<u16, HttpError> {
    let partial = partial_path(server, volume, hash);
    let size = fs::metadata(&partial).map_or(0, |m| m.len());
    if size > total {
        let _ = fs::remove_file(&partial);
        return Err(HttpError::invalid(format!(
            "the blob `{hash}` got {size} bytes, more than its total of {total}; the partial upload was discarded"
        )));
    }
    if size < total {
        return Ok(204);
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update_reader(fs::File::open(&partial)?)?;
    let got = hasher.finalize().to_hex().to_string();
    if got != hash {
        let _ = fs::remove_file(&partial);
        return Err(HttpError::new(
            ErrorCode::HashMismatch,
            format!(
                "the bytes sent for `{hash}` hash to `{got}`; the partial upload was discarded"
            ),
        )
        .with_details(json!({ "expected": hash, "actual": got })));
    }
    // In a turn of the commit lock, as a pack's write over a name is (`store_pack`).
    let lock = super::commit_lock(volume);
    let _turn = lock.lock().unwrap_or_else(|e| e.into_inner());
    fs::rename(&partial, blob_path(server, volume, hash))?;
    server.store.add_blob(volume, hash, total)?;
    Ok(201)
}

/// `POST /v1/volumes/{name}/blobs/pack`: several small whole blobs in one body
/// (`div_api::parse_pack`). Every blob is checked first (its form, its size, its bytes
/// against its hash), so a pack with one bad blob stores none; then each is made under its
/// name ([`write_new`]); where something is at the name already, one the volume holds is
/// left as it is, and any other is written beside it and renamed into place. All that were
/// written are recorded in one transaction. Answers how many were stored and how many the
/// volume already held.
pub(crate) fn store_pack(
    server: &Server,
    volume: &str,
    body: &[u8],
    stage: Option<&str>,
) -> Result<serde_json::Value, HttpError> {
    require_volume(server, volume)?;
    let blobs = div_api::parse_pack(body).map_err(HttpError::malformed)?;
    for (hash, data) in &blobs {
        if data.len() as u64 > div_api::PACK_BLOB_MAX_BYTES {
            return Err(HttpError::invalid(format!(
                "the blob `{hash}` is {} bytes; a pack carries blobs of at most {} bytes (send a larger one by itself)",
                data.len(),
                div_api::PACK_BLOB_MAX_BYTES
            )));
        }
        let got = blake3::hash(data).to_hex().to_string();
        if got != *hash {
            return Err(HttpError::new(
                ErrorCode::HashMismatch,
                format!(
                    "the bytes sent for `{hash}` hash to `{got}`; nothing of the pack was kept"
                ),
            )
            .with_details(json!({ "expected": hash, "actual": got })));
        }
    }
    // For a staged tree, the blobs it wants are written straight into it; the rest are
    // stored as any pack's.
    let (blobs, staged) = match stage {
        Some(id) => super::stage::write_into_stage(server, volume, id, &blobs)?,
        None => (blobs.iter().collect(), 0),
    };
    let partial = blob_dir(server, volume).join("partial");
    fs::create_dir_all(&partial)?;
    let full = |e: std::io::Error| {
        if crate::error::io_full(&e) {
            HttpError::disk_full("storing a pack of blobs")
        } else {
            HttpError::from(e)
        }
    };
    // The blob folder, held for the writes below (`None`: each blob is written the other
    // way).
    let blob_fd = rustix::fs::open(
        blob_dir(server, volume),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok();
    let mut stored: Vec<(&str, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut held = 0usize;
    // Each new blob is made under its name at once; only where something is at the name
    // already is the store asked whether the volume holds it (a cold ship's pack asks about
    // none of its 4,096).
    let mut there: Vec<(&str, &[u8])> = Vec::new();
    for &&(hash, data) in &blobs {
        if !seen.insert(hash) {
            held += 1;
            continue;
        }
        if let Some(dir) = &blob_fd
            && write_new(dir, hash, data).map_err(full)?
        {
            stored.push((hash, data.len() as u64));
            continue;
        }
        there.push((hash, data));
    }
    // Where something is at a name, the check of its record, the write over it and the
    // record are one turn of the volume's commit lock, which the retention pass holds for the
    // whole of its own: a pass that removed a blob's record but not yet its file would
    // otherwise delete the file written over it here, whose record is then made.
    let lock = (!there.is_empty()).then(|| super::commit_lock(volume));
    let _turn = lock
        .as_ref()
        .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
    let hashes: Vec<&str> = there.iter().map(|(hash, _)| *hash).collect();
    let already = server.store.has_blobs(volume, &hashes)?;
    for ((hash, data), already) in there.into_iter().zip(already) {
        if already {
            held += 1;
            continue;
        }
        // Its own name: two packs holding one new blob are written at once by two clients,
        // and one writer truncating the file the other has just renamed into place would
        // leave the blob empty while a tree links it (seen under load, hostile_client::
        // two_div_runs_at_once_shipping_new_code_both_succeed).
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = partial.join(format!("{hash}.pack-{}-{n}", std::process::id()));
        fs::write(&tmp, data).map_err(full)?;
        fs::rename(&tmp, blob_path(server, volume, hash)).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            full(e)
        })?;
        stored.push((hash, data.len() as u64));
    }
    server.store.add_blobs(volume, &stored)?;
    Ok(json!({ "stored": stored.len() + staged, "held": held }))
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
fn write_new(blobs: &OwnedFd, hash: &str, data: &[u8]) -> std::io::Result<bool> {
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
