//! `div storage`: put a local file or folder into a volume, get files back, list, remove.
//!
//! A put is the code upload's machinery — hashes, "which blobs do you lack", resumable blob
//! uploads, one commit — applied to any folder: only what the volume lacks is sent, and a put
//! that was interrupted sends only the rest when run again. Its tree is committed at the
//! volume's root (`""`), which writes each file as `cp` would: new paths are added, a file the
//! volume holds is replaced (the same content is left as it is), and a folder is never
//! replaced by a file, nor a link or a file written through.

pub(crate) mod get;
pub(crate) mod ls;
pub(crate) mod place;
pub(crate) mod put;

use div_api::ControlPlane;

use crate::error::RunError;

/// Remove a volume and everything in it.
pub async fn storage_rm(cp: &dyn ControlPlane, volume: &str) -> Result<(), RunError> {
    cp.delete_volume(volume).await.map_err(|e| {
        if e.is_not_found() {
            RunError::VolumeNotFound(volume.to_string())
        } else {
            RunError::api("remove the volume", e)
        }
    })
}
