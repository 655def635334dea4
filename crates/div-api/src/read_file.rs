//! Reading a volume's file into a sink, resuming across dropped connections: the rest is
//! asked for with `range: bytes=N-` and `if-range: <etag>`, so each byte is written once
//! and only bytes of one version of the file are written. A server that ignores ranges
//! (answers 200 from byte 0) is read past what was already written.
//!
//! The budget: the read goes on while bytes arrive, and gives up once
//! [`crate::Options::deadline`] has passed since the last byte was written.

use http::StatusCode;
use http::header::HeaderValue;
use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::ByteSink;
use crate::client::{Call, HttpControlPlane};
use crate::display;
use crate::error::{ApiError, ErrorKind};
use crate::routes::{self, Route, query_value};

impl HttpControlPlane {
    /// Write the file at `path` in `volume` into `sink`; the bytes written.
    pub(crate) async fn read_file_resuming(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        let deadline = self.inner.options.deadline;
        let mut written = 0u64;
        // The first answer's `etag` and the file's whole length, when the server said them.
        let mut etag: Option<HeaderValue> = None;
        let mut total: Option<u64> = None;
        let mut reconnects = 0u32;
        let mut last_progress = Instant::now();
        loop {
            let until = last_progress + deadline;
            if reconnects > 0 {
                let pause = self.backoff().pause(reconnects);
                if Instant::now() + pause >= until {
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "lost `{path}` at byte {written} and could not resume it within {}",
                            display::duration(deadline)
                        ),
                    ));
                }
                tokio::time::sleep(pause).await;
            }
            let resuming = reconnects > 0;
            reconnects += 1;
            let at = format!(
                "{}?path={}",
                routes::READ_FILE.path(&[volume]),
                query_value(path)
            );
            let mut call = Call::new(Route::ReadFile, at);
            if written > 0 {
                // The rest, and only of the same version of the file.
                if let Ok(range) = HeaderValue::from_str(&format!("bytes={written}-")) {
                    call.headers.push((http::header::RANGE, range));
                }
                if let Some(tag) = &etag {
                    call.headers.push((http::header::IF_RANGE, tag.clone()));
                }
            }
            let resp = match self.stream(call, until).await {
                Ok(resp) => resp,
                // The deadline since the last byte passed while asking for the rest.
                Err(e) if resuming && e.is_unavailable() => {
                    return Err(ApiError::new(
                        ErrorKind::Unavailable,
                        format!(
                            "lost `{path}` at byte {written} and could not resume it within {}",
                            display::duration(deadline)
                        ),
                    )
                    .with_source(e));
                }
                Err(e) => return Err(e),
            };
            let headers = resp.headers();
            let length = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let this_etag = headers.get(http::header::ETAG).cloned();
            // Where this answer starts: 206 says with `content-range`; 200 is from byte 0.
            let from = if resp.status() == StatusCode::PARTIAL_CONTENT {
                headers
                    .get(http::header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("bytes "))
                    .and_then(|v| v.split('-').next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorKind::Protocol,
                            format!(
                                "the control plane at `{}` sent part of `{path}` without saying which",
                                self.inner.endpoint
                            ),
                        )
                    })?
            } else {
                0
            };
            if written > 0 {
                let changed = match (&etag, &this_etag) {
                    (Some(a), Some(b)) => a != b,
                    _ => false,
                };
                if changed {
                    return Err(ApiError::new(
                        ErrorKind::Conflict,
                        format!(
                            "`{path}` in volume `{volume}` changed while it was being read (after {written} bytes); read it again"
                        ),
                    ));
                }
                if from > written {
                    return Err(ApiError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the control plane at `{}` resumed `{path}` at byte {from}, not {written}",
                            self.inner.endpoint
                        ),
                    ));
                }
            } else {
                etag = this_etag;
            }
            if total.is_none() {
                total = length.map(|l| from + l);
            }
            // Bytes of this answer already written (a server that ignored the range).
            let mut skip = written - from;
            let mut body = resp.into_body();
            loop {
                let until = last_progress + deadline;
                let frame = match tokio::time::timeout_at(until, body.frame()).await {
                    Err(_) => {
                        return Err(ApiError::new(
                            ErrorKind::Unavailable,
                            format!(
                                "the control plane at `{}` sent nothing of `{path}` for {}",
                                self.inner.endpoint,
                                display::duration(deadline)
                            ),
                        ));
                    }
                    Ok(None) => {
                        if total.is_some_and(|t| written < t) {
                            break; // ended short: resume
                        }
                        return flush(sink, path, written).await;
                    }
                    // Broken after the last byte: nothing is missing.
                    Ok(Some(Err(_))) if total.is_some_and(|t| written >= t) => {
                        return flush(sink, path, written).await;
                    }
                    Ok(Some(Err(e))) => {
                        tracing::debug!(
                            path,
                            written,
                            error = %self.redact(&display::error_chain(&e)),
                            "file read dropped; resuming"
                        );
                        break;
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                if let Ok(mut data) = frame.into_data() {
                    if skip > 0 {
                        let n = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
                        data = data.slice(n..);
                        skip -= n as u64;
                    }
                    if data.is_empty() {
                        continue;
                    }
                    sink.write_all(&data).await.map_err(|e| {
                        ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}"))
                            .with_source(e)
                    })?;
                    written += data.len() as u64;
                    last_progress = Instant::now();
                    reconnects = 1;
                }
            }
        }
    }
}

/// Flush what a read wrote into `sink`; returns `written`, the byte count.
async fn flush(sink: ByteSink<'_>, path: &str, written: u64) -> Result<u64, ApiError> {
    sink.flush().await.map_err(|e| {
        ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}")).with_source(e)
    })?;
    Ok(written)
}
