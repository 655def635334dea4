//! A volume's blobs: which of a shipment's the volume lacks, a resumable upload finished and
//! checked, and packs of small whole blobs.

use std::collections::BTreeSet;
use std::fs;

use div_api::MissingBlobs;
use serde_json::json;

use super::{blob_dir, blob_path, partial_path, require_volume, valid_hash};
use crate::error::{ErrorCode, HttpError};
use crate::server::Server;

pub(crate) fn missing_blobs(
    server: &Server,
    volume: &str,
    hashes: &[String],
) -> Result<MissingBlobs, HttpError> {
    require_volume(server, volume)?;
    let mut missing = Vec::new();
    let mut partial = std::collections::BTreeMap::new();
    let mut seen = BTreeSet::new();
    // The partial uploads there are, read once (a cold ship asks about every file, and
    // there are seldom any).
    let partials: std::collections::HashSet<String> =
        fs::read_dir(blob_dir(server, volume).join("partial"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
    for hash in hashes {
        if !seen.insert(hash.as_str()) {
            continue;
        }
        if valid_hash(hash) && server.store.has_blob(volume, hash)? {
            continue;
        }
        missing.push(hash.clone());
        if valid_hash(hash)
            && partials.contains(hash)
            && let Ok(m) = fs::metadata(partial_path(server, volume, hash))
            && m.len() > 0
        {
            partial.insert(hash.clone(), m.len());
        }
    }
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
    fs::rename(&partial, blob_path(server, volume, hash))?;
    server.store.add_blob(volume, hash, total)?;
    Ok(201)
}

/// `POST /v1/volumes/{name}/blobs/pack`: several small whole blobs in one body
/// (`div_api::parse_pack`). Every blob is checked first (its form, its size, its bytes
/// against its hash), so a pack with one bad blob stores none; then each one the volume
/// lacks is written beside its place and renamed into it, and all are recorded in one
/// transaction. Answers how many were stored and how many the volume already held.
pub(crate) fn store_pack(
    server: &Server,
    volume: &str,
    body: &[u8],
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
    let partial = blob_dir(server, volume).join("partial");
    fs::create_dir_all(&partial)?;
    let full = |e: std::io::Error| {
        if crate::error::io_full(&e) {
            HttpError::disk_full("storing a pack of blobs")
        } else {
            HttpError::from(e)
        }
    };
    let mut stored: Vec<(&str, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut held = 0usize;
    for (hash, data) in &blobs {
        if !seen.insert(&**hash) || server.store.has_blob(volume, hash)? {
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
    Ok(json!({ "stored": stored.len(), "held": held }))
}
