//! A run's log as a [`LogStream`] over HTTP: frames (`logframe.rs`) read from
//! `GET /v1/runs/{run}/log`, and when the connection drops, asked for again from the last
//! byte delivered, so each byte is yielded once, in order.
//!
//! The budget: the stream goes on while news arrives (a whole frame: bytes, a beat, the
//! end), and gives up once [`crate::Options::deadline`] has passed since the last news;
//! between reconnections that brought none it waits as the retry policy's backoff says.

use std::collections::VecDeque;

use async_trait::async_trait;
use http::header::CONTENT_TYPE;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use crate::LogStream;
use crate::client::{Call, HttpControlPlane};
use crate::display;
use crate::error::{ApiError, ErrorKind};
use crate::logframe::{self, Decoder, Frame};
use crate::models::LogEvent;
use crate::routes::{self, Route};

/// The log of `run` from `offset`; with `follow`, until the run ends.
pub(crate) async fn open(
    cp: &HttpControlPlane,
    run: &str,
    node: Option<u32>,
    offset: u64,
    follow: bool,
) -> Result<Box<dyn LogStream>, ApiError> {
    let body = open_log(cp, run, node, offset, follow, cp.deadline()).await?;
    Ok(Box::new(HttpLogStream {
        cp: cp.clone(),
        run: run.to_owned(),
        node,
        follow,
        next_offset: offset,
        decoder: Decoder::new(),
        body: Some(body),
        pending: VecDeque::new(),
        done: false,
        last_progress: Instant::now(),
        reconnects: 0,
    }))
}

/// A run's log over HTTP, reconnecting from the last delivered byte when the connection
/// drops.
struct HttpLogStream {
    cp: HttpControlPlane,
    run: String,
    /// One node's log of a multi-node run rather than the run's (`?node=K`).
    node: Option<u32>,
    follow: bool,
    /// The offset of the next byte to deliver.
    next_offset: u64,
    decoder: Decoder,
    body: Option<Incoming>,
    pending: VecDeque<LogEvent>,
    done: bool,
    last_progress: Instant,
    /// Reconnections since bytes last arrived.
    reconnects: u32,
}

impl HttpLogStream {
    fn fail(&mut self, kind: ErrorKind, message: String) -> Option<Result<LogEvent, ApiError>> {
        self.done = true;
        self.body = None;
        Some(Err(ApiError::new(kind, message)))
    }

    /// Take every whole frame the decoder holds; whether any was news (new bytes, a beat,
    /// the end).
    fn drain(&mut self) -> Result<bool, ApiError> {
        let mut news = false;
        loop {
            let frame = self.decoder.next_frame().map_err(|e| {
                ApiError::new(
                    ErrorKind::Protocol,
                    format!("the log of `{}` is not well framed: {e}", self.run),
                )
                .with_source(e)
            })?;
            match frame {
                None => return Ok(news),
                Some(Frame::Beat) => news = true,
                Some(Frame::Chunk { offset, data }) => {
                    let end = offset + data.len() as u64;
                    if end <= self.next_offset {
                        continue; // Already delivered.
                    }
                    if offset > self.next_offset {
                        return Err(ApiError::new(
                            ErrorKind::Protocol,
                            format!(
                                "the log of `{}` skipped from byte {} to byte {offset}",
                                self.run, self.next_offset
                            ),
                        ));
                    }
                    let skip = usize::try_from(self.next_offset - offset)
                        .expect("less than the chunk's length");
                    let data = data.slice(skip..);
                    self.pending.push_back(LogEvent::Chunk {
                        offset: self.next_offset,
                        data,
                    });
                    self.next_offset = end;
                    news = true;
                }
                Some(Frame::Tail { offset }) => {
                    self.pending.push_back(LogEvent::Tail { offset });
                    self.done = true;
                    self.body = None;
                    return Ok(true);
                }
                Some(Frame::End(run)) => {
                    self.pending.push_back(LogEvent::End(run));
                    self.done = true;
                    self.body = None;
                    return Ok(true);
                }
            }
        }
    }
}

#[async_trait]
impl LogStream for HttpLogStream {
    async fn next(&mut self) -> Option<Result<LogEvent, ApiError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.done {
                return None;
            }
            let until = self.last_progress + self.cp.inner.options.deadline;
            let body = match &mut self.body {
                Some(body) => body,
                None => {
                    if self.reconnects > 0 {
                        let pause = self.cp.backoff().pause(self.reconnects);
                        if Instant::now() + pause >= until {
                            let message = format!(
                                "lost the log of `{}` at byte {} and could not resume it within {}",
                                self.run,
                                self.next_offset,
                                display::duration(self.cp.inner.options.deadline)
                            );
                            return self.fail(ErrorKind::Unavailable, message);
                        }
                        tokio::time::sleep(pause).await;
                    }
                    self.reconnects += 1;
                    let (node, at) = (self.node, self.next_offset);
                    match open_log(&self.cp, &self.run, node, at, self.follow, until).await {
                        Ok(body) => {
                            self.decoder = Decoder::new();
                            self.body.insert(body)
                        }
                        // The deadline since the last news passed while asking again.
                        Err(e) if e.is_unavailable() => {
                            let message = format!(
                                "lost the log of `{}` at byte {} and could not resume it within {}",
                                self.run,
                                self.next_offset,
                                display::duration(self.cp.inner.options.deadline),
                            );
                            self.done = true;
                            self.body = None;
                            return Some(Err(
                                ApiError::new(ErrorKind::Unavailable, message).with_source(e)
                            ));
                        }
                        Err(e) => {
                            self.done = true;
                            return Some(Err(e));
                        }
                    }
                }
            };
            match tokio::time::timeout_at(until, body.frame()).await {
                Err(_) => {
                    let message = format!(
                        "the log of `{}` received nothing for {} (at byte {})",
                        self.run,
                        display::duration(self.cp.inner.options.deadline),
                        self.next_offset
                    );
                    return self.fail(ErrorKind::Unavailable, message);
                }
                Ok(None) | Ok(Some(Err(_))) => {
                    // The connection ended before the stream did: ask again from the last
                    // byte delivered.
                    tracing::debug!(run = %self.run, offset = self.next_offset, "log stream dropped; resuming");
                    self.body = None;
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data()
                        && !data.is_empty()
                    {
                        self.decoder.push_bytes(data);
                        match self.drain() {
                            // Progress is a whole frame (new bytes, a beat, the end), not
                            // raw bytes: a server cutting every connection mid-header
                            // would otherwise be retried forever.
                            Ok(true) => {
                                self.last_progress = Instant::now();
                                self.reconnects = 0;
                            }
                            Ok(false) => {}
                            Err(e) => {
                                self.done = true;
                                self.body = None;
                                return Some(Err(e));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Ask for the log of `run` from `offset`; tries end at `until`.
async fn open_log(
    cp: &HttpControlPlane,
    run: &str,
    node: Option<u32>,
    offset: u64,
    follow: bool,
    until: Instant,
) -> Result<Incoming, ApiError> {
    // `node` only when asked: a server from before it serves the run's log as ever.
    let node = node.map(|k| format!("&node={k}")).unwrap_or_default();
    let path = format!(
        "{}?offset={offset}&follow={follow}{node}",
        routes::LOG.path(&[run])
    );
    let call = Call::new(Route::Log, path);
    let resp = cp.stream(call, until).await?;
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with(logframe::MEDIA_TYPE) {
        return Err(ApiError::new(
            ErrorKind::Protocol,
            format!(
                "the control plane sent the log of `{run}` as `{content_type}`, not `{}`",
                logframe::MEDIA_TYPE
            ),
        ));
    }
    Ok(resp.into_body())
}
