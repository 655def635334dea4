//! A pack of small whole blobs in one body (`POST /v1/volumes/{name}/blobs/pack`): stored as
//! blobs, or written straight into the staged tree that wants them.

use std::fs;

use rustix::fs::{Mode, OFlags};
use serde_json::json;

use super::blobs::write_new;
use super::error::UploadError;
use super::paths::commit_lock;
use super::{Volumes, require_volume, stage};
use crate::fault::StateError;

/// `POST /v1/volumes/{name}/blobs/pack`: several small whole blobs in one body
/// (`div_api::parse_pack`). Every blob is checked first (its form, its size, its bytes
/// against its hash), so a pack with one bad blob stores none; then each is made under its
/// name ([`write_new`]); where something is at the name already, one the volume holds is
/// left as it is, and any other is written beside it and renamed into place. All that were
/// written are recorded in one transaction. Answers how many were stored and how many the
/// volume already held.
pub(crate) fn store_pack(
    vols: &Volumes<'_>,
    volume: &str,
    body: &[u8],
    stage: Option<&str>,
) -> Result<serde_json::Value, UploadError> {
    require_volume(vols, volume)?;
    let blobs = div_api::parse_pack(body).map_err(|e| UploadError::NotAPack(e.to_string()))?;
    for (hash, data) in &blobs {
        if data.len() as u64 > div_api::PACK_BLOB_MAX_BYTES {
            return Err(UploadError::TooLargeForAPack {
                hash: (*hash).to_owned(),
                size: data.len(),
            });
        }
        let got = blake3::hash(data).to_hex().to_string();
        if got != *hash {
            return Err(UploadError::HashMismatch {
                expected: (*hash).to_owned(),
                actual: got,
                kept: "nothing of the pack was kept",
            });
        }
    }
    // For a staged tree, the blobs it wants are written straight into it; the rest are
    // stored as any pack's.
    let (blobs, staged) = match stage {
        Some(id) => stage::write_into_stage(vols, volume, id, &blobs)?,
        None => (blobs.iter().collect(), 0),
    };
    let partial = vols.home.blob_dir(volume).join("partial");
    fs::create_dir_all(&partial)?;
    let full = |e: std::io::Error| StateError::io_while("storing a pack of blobs", e);
    // The blob folder, held for the writes below (`None`: each blob is written the other
    // way).
    let blob_fd = rustix::fs::open(
        vols.home.blob_dir(volume),
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
    let lock = (!there.is_empty()).then(|| commit_lock(volume));
    let _turn = lock
        .as_ref()
        .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
    let hashes: Vec<&str> = there.iter().map(|(hash, _)| *hash).collect();
    let already = vols.store.has_blobs(volume, &hashes)?;
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
        fs::rename(&tmp, vols.home.blob_path(volume, hash)).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            full(e)
        })?;
        stored.push((hash, data.len() as u64));
    }
    vols.store.add_blobs(volume, &stored)?;
    Ok(json!({ "stored": stored.len() + staged, "held": held }))
}
