//! The upload plan: which blobs to send, from where, and how much of each.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use crate::Shipment;
use crate::manifest::EntryKind;

/// What to send so that the volume has every blob of a shipment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPlan {
    /// One per missing content (identical files are sent once), in manifest order.
    pub blobs: Vec<PlannedBlob>,
    /// Bytes to send, summed over [`blobs`](Self::blobs) (`len`, not `size`).
    pub total_bytes: u64,
    /// Blobs to send.
    pub total_files: u64,
    /// Bytes of the shipment's distinct contents the volume already has, whole or in part.
    pub already_there_bytes: u64,
}

/// One blob to send: `len` bytes of the file at `path`, from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBlob {
    /// blake3 of the whole content, lowercase hex.
    pub hash: String,
    /// The local file to read it from.
    pub path: PathBuf,
    /// Where to start: what the volume already received of it.
    pub offset: u64,
    /// How many bytes to send (`size - offset`).
    pub len: u64,
    /// The whole content's size.
    pub size: u64,
}

impl UploadPlan {
    /// Plans the upload of `shipment` to a volume that lacks the blobs `missing` (hashes; ones not
    /// in the shipment are ignored) and already received `partial[hash]` bytes of some of them
    /// (an offset past the size restarts that blob from 0).
    pub fn new(
        shipment: &Shipment,
        missing: &[String],
        partial: &BTreeMap<String, u64>,
    ) -> UploadPlan {
        let missing: HashSet<&str> = missing.iter().map(String::as_str).collect();
        let mut seen = HashSet::new();
        let mut plan = UploadPlan {
            blobs: Vec::new(),
            total_bytes: 0,
            total_files: 0,
            already_there_bytes: 0,
        };
        for entry in &shipment.manifest.entries {
            let (EntryKind::File, Some(hash)) = (entry.kind, entry.hash.as_deref()) else {
                continue;
            };
            if !seen.insert(hash) {
                continue;
            }
            if !missing.contains(hash) {
                plan.already_there_bytes += entry.size;
                continue;
            }
            let offset = partial
                .get(hash)
                .copied()
                .filter(|&o| o <= entry.size)
                .unwrap_or(0);
            let len = entry.size - offset;
            plan.already_there_bytes += offset;
            plan.total_bytes += len;
            plan.total_files += 1;
            plan.blobs.push(PlannedBlob {
                hash: hash.to_owned(),
                path: shipment.local_path(&entry.path),
                offset,
                len,
                size: entry.size,
            });
        }
        plan
    }
}
