//! `GET /v1/volumes/{volume}/file?path=P`: a volume's file, resumable with `range`.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use super::error::{ErrorCode, HttpError};
use super::wire::{ChannelBody, Resp, blocking, fail, header, param};
use crate::server::Server;
use crate::volumes;

/// The response to `GET /v1/volumes/{volume}/file?path=P`, honouring `range` and `if-range`
/// as [`file_response`] says.
pub(crate) async fn respond(
    server: &Arc<Server>,
    volume: String,
    q: &[(String, String)],
    req: &Request<Incoming>,
) -> Result<Resp, HttpError> {
    let path = param(q, "path").unwrap_or_default();
    let file = blocking(server, move |s| {
        volumes::open_file(&s.volumes(), &volume, &path)
    })
    .await?;
    let range = header(req, "range");
    let if_range = header(req, "if-range");
    opened_file_response(
        tokio::fs::File::from_std(file),
        range.as_deref(),
        if_range.as_deref(),
    )
    .await
}

/// A file of a volume as a response: its bytes with their length and an `etag` made of its
/// identity, size and modification time; from the byte a `range: bytes=N-` asks for (206,
/// with `content-range`) unless an `if-range` names another version of it (then all of it,
/// 200). A start at or past the end is 416. Other range forms are ignored (200), as HTTP
/// allows. Only the length announced is sent, so a file that grows meanwhile is cut there,
/// and one that cannot be read to that length ends the response short (an error at the
/// client, never a silently shorter file).
pub(crate) async fn file_response(
    file: &std::path::Path,
    range: Option<&str>,
    if_range: Option<&str>,
) -> Result<Resp, HttpError> {
    opened_file_response(tokio::fs::File::open(file).await?, range, if_range).await
}

/// [`file_response`] of a file already opened (a volume's, opened beneath it without
/// following links: [`volumes::open_file`]).
async fn opened_file_response(
    mut f: tokio::fs::File,
    range: Option<&str>,
    if_range: Option<&str>,
) -> Result<Resp, HttpError> {
    use std::os::unix::fs::MetadataExt;
    let meta = f.metadata().await?;
    let size = meta.len();
    let etag = format!(
        "\"{:x}-{:x}-{:x}-{:x}\"",
        meta.dev(),
        meta.ino(),
        size,
        meta.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec())
    );
    let start = range
        .and_then(|r| r.trim().strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|_| if_range.is_none_or(|v| v == etag));
    if let Some(start) = start
        && start >= size
    {
        let mut resp = fail(HttpError::new(
            ErrorCode::RangeNotSatisfiable,
            format!("the file has {size} bytes; there is nothing from byte {start}"),
        ));
        if let Ok(range) = http::HeaderValue::from_str(&format!("bytes */{size}")) {
            resp.headers_mut().insert("content-range", range);
        }
        if let Ok(tag) = http::HeaderValue::from_str(&etag) {
            resp.headers_mut().insert("etag", tag);
        }
        return Ok(resp);
    }
    let from = start.unwrap_or(0);
    if from > 0 {
        f.seek(std::io::SeekFrom::Start(from)).await?;
    }
    let length = size - from;
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut f = f.take(length);
        loop {
            let mut buf = bytes::BytesMut::with_capacity(256 << 10);
            match f.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(buf.freeze()).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut resp = Response::builder()
        .status(if start.is_some() {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header("content-type", "application/octet-stream")
        .header("content-length", length)
        .header("accept-ranges", "bytes")
        .header("etag", &etag);
    if start.is_some() {
        resp = resp.header(
            "content-range",
            format!("bytes {from}-{}/{size}", size.saturating_sub(1)),
        );
    }
    Ok(resp
        .body(ChannelBody(rx).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())))
}
