//! Blob uploads that resume across dropped connections. This loop is the one owner of
//! upload resumption: [`crate::upload_blob_resuming`] asks where the volume stands and calls
//! [`crate::ControlPlane::upload_blob`] once; div-core calls it once per blob.
//!
//! # The budget
//!
//! After a failed try the loop learns how many bytes the server holds: from the 409
//! `offset_mismatch` answer's `received`, or, when the connection was cut or the server
//! kept failing, by asking which blobs the volume lacks (`POST …/blobs/missing`). It then
//! sends the rest.
//! It goes on as long as the server's count grows; once [`crate::Options::deadline`] has
//! passed since the count last grew, it gives up with the last failure. Between tries that
//! made no progress it waits as the retry policy's backoff says. Each request within the
//! loop (each `PUT`, each question) has its own deadline and retries, as every request does.

use serde_json::Value;
use tokio::time::Instant;

use crate::BlobSource;
use crate::client::{Call, CallBody, HttpControlPlane};
use crate::display;
use crate::error::{ApiError, ErrorKind};
use crate::models::{MissingBlobs, MissingBlobsRequest};
use crate::routes::{self, Route};

impl HttpControlPlane {
    /// Send `data`, the blob's bytes from `start` of `total`, resuming where the server
    /// stands after each failure, within the budget above.
    pub(crate) async fn upload_resuming(
        &self,
        volume: &str,
        hash: &str,
        start: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        let deadline = self.inner.options.deadline;
        let mut offset = start;
        let mut last_progress = Instant::now();
        let mut stalls = 0u32;
        loop {
            let error = match self
                .upload_once(volume, hash, offset, total, data.skip(offset - start))
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let received = if error.code() == Some("offset_mismatch") {
                match error.details().get("received").and_then(Value::as_u64) {
                    Some(received) => received,
                    None => return Err(error),
                }
            } else if error.is_unavailable() {
                // The connection was cut, or the server kept failing: ask how much arrived.
                let missing = self.missing(volume, hash).await?;
                if !missing.missing.iter().any(|h| h == hash) {
                    return Ok(());
                }
                missing.partial.get(hash).copied().unwrap_or(0)
            } else {
                return Err(error);
            };
            if received < start || received > total {
                // The bytes the server holds are not ones this call can continue (another
                // upload's partial was discarded, or it is not this blob's): the caller
                // sends again from where the server stands. The server's own answer, with
                // its code, says so.
                return Err(error);
            }
            if received > offset {
                last_progress = Instant::now();
                stalls = 0;
            } else {
                stalls += 1;
                let pause = self.backoff().pause(stalls);
                if Instant::now() + pause >= last_progress + deadline {
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "the upload of `{hash}` to volume `{volume}` stopped at byte {received} of {total} and could not resume within {}",
                            display::duration(deadline)
                        ),
                    )
                    .with_source(error));
                }
                tokio::time::sleep(pause).await;
            }
            tracing::debug!(hash, from = received, "upload resuming");
            offset = received;
        }
    }

    /// What the volume lacks of the blob `hash` (`POST /v1/volumes/{name}/blobs/missing`).
    async fn missing(&self, volume: &str, hash: &str) -> Result<MissingBlobs, ApiError> {
        let body = MissingBlobsRequest {
            hashes: vec![hash.to_owned()],
        };
        let path = routes::MISSING_BLOBS.path(&[volume]);
        self.json(Call::with_json(Route::MissingBlobs, path, &body))
            .await
    }

    /// One `PUT` of a blob's bytes from `offset`.
    async fn upload_once(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        let path = format!(
            "{}?offset={offset}&total={total}",
            routes::UPLOAD_BLOB.path(&[volume, hash])
        );
        let call = Call {
            body: CallBody::Blob(data),
            ..Call::new(Route::UploadBlob, path)
        };
        self.empty(call).await.map(drop)
    }
}
