//! `PUT /v1/volumes/{volume}/blobs/{hash}?offset=N&total=M`: a resumable, verified upload of
//! one blob, and the per-blob locks that make uploads of one blob take turns.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::Request;
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::error::{ErrorCode, HttpError};
use super::wire::{Resp, blocking, empty, param, read_body};
use crate::fault::io_full;
use crate::server::Server;
use crate::volumes;

type UploadKey = (String, String);

/// Per-blob locks for uploads, keyed by (volume, hash); an entry lives while someone holds or
/// waits for it.
#[derive(Debug, Default)]
pub(crate) struct UploadLocks(
    std::sync::Mutex<std::collections::HashMap<UploadKey, std::sync::Arc<tokio::sync::Mutex<()>>>>,
);

/// Held while one upload of a blob checks, appends to and finishes its partial file.
pub(crate) struct UploadGuard<'a> {
    locks: &'a UploadLocks,
    key: UploadKey,
    lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl UploadLocks {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::HashMap<UploadKey, std::sync::Arc<tokio::sync::Mutex<()>>>,
    > {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no other upload of `hash` into `volume` is under way, and holds it.
    pub(crate) async fn lock(&self, volume: &str, hash: &str) -> UploadGuard<'_> {
        let key = (volume.to_owned(), hash.to_owned());
        let lock = std::sync::Arc::clone(self.map().entry(key.clone()).or_default());
        let held = std::sync::Arc::clone(&lock).lock_owned().await;
        UploadGuard {
            locks: self,
            key,
            lock,
            held: Some(held),
        }
    }

    /// How many blobs have an upload under way or waiting (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

impl Drop for UploadGuard<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.map();
        self.held = None;
        // Only the map and this guard hold it: nobody waits, so the entry goes.
        if std::sync::Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.key);
        }
    }
}

/// Appends the body to the blob's partial upload from byte `offset`, then finishes it (see
/// [`volumes::finish_upload`]).
pub(crate) async fn upload(
    server: &Arc<Server>,
    locks: &UploadLocks,
    found: &div_api::routes::Found<'_>,
    q: &[(String, String)],
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let (volume, hash) = (
        super::volumes::named(found)?,
        found.param("hash").to_owned(),
    );
    let offset: u64 = param(q, "offset")
        .unwrap_or_else(|| "0".into())
        .parse()
        .map_err(|_| HttpError::malformed("`offset` is not a number"))?;
    let total: u64 = param(q, "total")
        .ok_or_else(|| HttpError::malformed("`total` is required"))?
        .parse()
        .map_err(|_| HttpError::malformed("`total` is not a number"))?;
    if !volumes::valid_hash(&hash) {
        return Err(HttpError::malformed(format!(
            "`{hash}` is not a blake3 hash (64 lowercase hex digits)"
        )));
    }
    // Uploads of one blob take turns: a second waits while the first appends, then finds the
    // blob whole (201) or resumes where the first stopped.
    let _turn = locks.lock(&volume, &hash).await;
    let (v2, h2) = (volume.clone(), hash.clone());
    let (have, partial) = blocking(server, move |s| {
        volumes::begin_upload(&s.volumes(), &v2, &h2)
    })
    .await?;
    if have {
        let _ = read_body(req).await;
        return Ok(empty(201));
    }
    let received = tokio::fs::metadata(&partial).await.map_or(0, |m| m.len());
    if offset != received {
        return Err(HttpError::new(
            ErrorCode::OffsetMismatch,
            format!("the upload of `{hash}` is at byte {received}, not {offset}"),
        )
        .with_details(json!({ "received": received })));
    }
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&partial)
        .await?;
    let mut body = req.into_body();
    let full = |e: std::io::Error| {
        if io_full(&e) {
            HttpError::disk_full(&format!("storing the blob `{hash}`"))
        } else {
            HttpError::from(e)
        }
    };
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            file.write_all(&data).await.map_err(full)?;
        }
    }
    file.flush().await.map_err(full)?;
    drop(file);
    let status = blocking(server, move |s| {
        volumes::finish_upload(&s.volumes(), &volume, &hash, total)
    })
    .await?;
    Ok(empty(status))
}

#[cfg(test)]
mod tests {
    use super::UploadLocks;

    #[tokio::test]
    async fn upload_locks_serialise_one_blob_and_are_dropped_after() {
        let locks = UploadLocks::default();
        let first = locks.lock("v", "a").await;
        let other = locks.lock("v", "b").await;
        assert_eq!(locks.len(), 2);
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(20), locks.lock("v", "a")).await;
        assert!(waiting.is_err(), "a second upload of one blob must wait");
        drop(first);
        let again = locks.lock("v", "a").await;
        drop(again);
        drop(other);
        assert_eq!(locks.len(), 0);
    }
}
