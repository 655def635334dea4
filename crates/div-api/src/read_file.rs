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
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::ByteSink;
use crate::client::{Call, HttpControlPlane};
use crate::display;
use crate::error::{ApiError, ErrorKind};
use crate::routes::{self, Route, query_value};

/// Where a resuming read stands.
struct Read<'a> {
    volume: &'a str,
    path: &'a str,
    /// Bytes written into the sink.
    written: u64,
    /// The first answer's `etag`, when the server said one.
    etag: Option<HeaderValue>,
    /// The file's whole length, when the server said it.
    total: Option<u64>,
    /// Requests made; reset to 1 by each byte written, so a pause grows only while nothing
    /// arrives.
    reconnects: u32,
    /// When the last byte was written (or the read began).
    last_progress: Instant,
}

impl HttpControlPlane {
    /// Write the file at `path` in `volume` into `sink`; the bytes written.
    pub(crate) async fn read_file_resuming(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        let deadline = self.inner.options.deadline;
        let mut read = Read {
            volume,
            path,
            written: 0,
            etag: None,
            total: None,
            reconnects: 0,
            last_progress: Instant::now(),
        };
        loop {
            let until = read.last_progress + deadline;
            if read.reconnects > 0 {
                let pause = self.backoff().pause(read.reconnects);
                if Instant::now() + pause >= until {
                    return Err(lost(&read, deadline));
                }
                tokio::time::sleep(pause).await;
            }
            let resuming = read.reconnects > 0;
            read.reconnects += 1;
            let resp = match self.stream(read_call(&read), until).await {
                Ok(resp) => resp,
                // The deadline since the last byte passed while asking for the rest.
                Err(e) if resuming && e.is_unavailable() => {
                    return Err(lost(&read, deadline).with_source(e));
                }
                Err(e) => return Err(e),
            };
            let from = self.answer_starts_at(&mut read, &resp)?;
            if let Some(written) = self
                .write_answer(&mut read, resp.into_body(), from, &mut *sink)
                .await?
            {
                return Ok(written);
            }
        }
    }

    /// Where an answer starts (206 says with `content-range`; 200 is from byte 0), once it is
    /// of the version of the file read so far and starts no later than what was written; the
    /// first answer's `etag` and the file's length are kept.
    fn answer_starts_at(
        &self,
        read: &mut Read<'_>,
        resp: &http::Response<Incoming>,
    ) -> Result<u64, ApiError> {
        let path = read.path;
        let headers = resp.headers();
        let length = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let this_etag = headers.get(http::header::ETAG).cloned();
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
        let written = read.written;
        if written > 0 {
            let changed = match (&read.etag, &this_etag) {
                (Some(a), Some(b)) => a != b,
                _ => false,
            };
            if changed {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!(
                        "`{path}` in volume `{}` changed while it was being read (after {written} bytes); read it again",
                        read.volume
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
            read.etag = this_etag;
        }
        if read.total.is_none() {
            read.total = length.map(|l| from + l);
        }
        Ok(from)
    }

    /// Writes an answer's body, starting at byte `from` of the file, into `sink`, past what
    /// was written already: `Some` of the bytes written once the file is whole (and flushed),
    /// `None` when the answer was cut short and the rest is to be asked for.
    async fn write_answer(
        &self,
        read: &mut Read<'_>,
        mut body: Incoming,
        from: u64,
        sink: ByteSink<'_>,
    ) -> Result<Option<u64>, ApiError> {
        let (path, deadline) = (read.path, self.inner.options.deadline);
        // Bytes of this answer already written (a server that ignored the range).
        let mut skip = read.written - from;
        loop {
            let until = read.last_progress + deadline;
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
                    if read.total.is_some_and(|t| read.written < t) {
                        return Ok(None); // ended short: resume
                    }
                    return flush(sink, path, read.written).await.map(Some);
                }
                // Broken after the last byte: nothing is missing.
                Ok(Some(Err(_))) if read.total.is_some_and(|t| read.written >= t) => {
                    return flush(sink, path, read.written).await.map(Some);
                }
                Ok(Some(Err(e))) => {
                    tracing::debug!(
                        path,
                        written = read.written,
                        error = %self.redact(&display::error_chain(&e)),
                        "file read dropped; resuming"
                    );
                    return Ok(None);
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
                read.written += data.len() as u64;
                read.last_progress = Instant::now();
                read.reconnects = 1;
            }
        }
    }
}

/// The request for the rest of the file: from the first byte not written, and only of the
/// version of the file read so far.
fn read_call(read: &Read<'_>) -> Call<'static> {
    let at = format!(
        "{}?path={}",
        routes::READ_FILE.path(&[read.volume]),
        query_value(read.path)
    );
    let mut call = Call::new(Route::ReadFile, at);
    if read.written > 0 {
        if let Ok(range) = HeaderValue::from_str(&format!("bytes={}-", read.written)) {
            call.headers.push((http::header::RANGE, range));
        }
        if let Some(tag) = &read.etag {
            call.headers.push((http::header::IF_RANGE, tag.clone()));
        }
    }
    call
}

/// The read given up: no byte came for the whole deadline, reconnects included.
fn lost(read: &Read<'_>, deadline: std::time::Duration) -> ApiError {
    ApiError::new(
        ErrorKind::Unavailable,
        format!(
            "lost `{}` at byte {} and could not resume it within {}",
            read.path,
            read.written,
            display::duration(deadline)
        ),
    )
}

/// Flush what a read wrote into `sink`; returns `written`, the byte count.
async fn flush(sink: ByteSink<'_>, path: &str, written: u64) -> Result<u64, ApiError> {
    sink.flush().await.map_err(|e| {
        ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}")).with_source(e)
    })?;
    Ok(written)
}
