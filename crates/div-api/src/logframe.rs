//! The log stream's framing, `application/vnd.div.log`: the server writes frames with the
//! `encode_*` functions and [`BEAT`], the client reads them with a [`Decoder`].
//!
//! Each frame is a header line, then for some a body:
//!
//! - `chunk <offset> <len>\n` then `len` bytes: the log's bytes from `offset`;
//! - `beat\n`: nothing new yet (sent while following, so a dead connection is noticed);
//! - `tail <offset>\n`: without `follow`, the log has no more bytes now and the run goes on;
//! - `end <len>\n` then `len` bytes of JSON: the run as it ended; every byte was sent.
//!
//! ```
//! use div_api::logframe::{self, Decoder, Frame};
//!
//! let mut wire = logframe::encode_chunk(0, b"hello\n").to_vec();
//! wire.extend_from_slice(logframe::BEAT);
//! wire.extend_from_slice(&logframe::encode_tail(6));
//!
//! let mut decoder = Decoder::new();
//! let mut frames = Vec::new();
//! for byte in wire {
//!     // Any split of the bytes decodes the same.
//!     decoder.push(&[byte]);
//!     while let Some(frame) = decoder.next_frame().expect("well-formed frames") {
//!         frames.push(frame);
//!     }
//! }
//! assert_eq!(frames.len(), 8); // six one-byte chunks, the beat, the tail
//! assert_eq!(frames[7], Frame::Tail { offset: 6 });
//! ```

use bytes::{Bytes, BytesMut};

use crate::models::Run;

/// The media type of the log stream.
pub const MEDIA_TYPE: &str = "application/vnd.div.log";

/// The `beat` frame: nothing new yet.
pub const BEAT: &[u8] = b"beat\n";

/// The longest header line a [`Decoder`] accepts, newline included.
pub const MAX_HEADER_LEN: usize = 64;

/// The largest `end` body a [`Decoder`] accepts, in bytes.
pub const MAX_END_LEN: u64 = 16 << 20;

/// A `chunk` frame: header and the bytes.
pub fn encode_chunk(offset: u64, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(32 + data.len());
    out.extend_from_slice(chunk_header(offset, data.len() as u64).as_bytes());
    out.extend_from_slice(data);
    out.freeze()
}

/// The header line of a `chunk` frame alone, for a writer that sends the `len` bytes after it
/// itself (say, straight from a file).
pub fn chunk_header(offset: u64, len: u64) -> String {
    format!("chunk {offset} {len}\n")
}

/// An `end` frame carrying the run as it ended.
pub fn encode_end(run: &Run) -> Bytes {
    let json = serde_json::to_vec(run).expect("a run serializes: its maps have string keys");
    let mut out = BytesMut::with_capacity(24 + json.len());
    out.extend_from_slice(format!("end {}\n", json.len()).as_bytes());
    out.extend_from_slice(&json);
    out.freeze()
}

/// A `tail` frame: no more bytes now; a later read resumes at `offset`.
pub fn encode_tail(offset: u64) -> Bytes {
    Bytes::from(format!("tail {offset}\n"))
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// Bytes of the log from `offset`. A [`Decoder`] hands a chunk's body on as it arrives,
    /// so one `chunk` frame on the wire may come out as several of these, in order.
    Chunk { offset: u64, data: Bytes },
    /// Nothing new yet.
    Beat,
    /// No more bytes now; a later read resumes at `offset`.
    Tail { offset: u64 },
    /// The run as it ended.
    End(Box<Run>),
}

/// The error returned by [`Decoder::next_frame`] when the bytes are not frames.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A header line that is not one of the four frames.
    #[error("bad log frame header `{0}`")]
    BadHeader(String),
    /// A header line longer than [`MAX_HEADER_LEN`].
    #[error("log frame header longer than {MAX_HEADER_LEN} bytes")]
    HeaderTooLong,
    /// An `end` frame longer than [`MAX_END_LEN`].
    #[error("log `end` frame of {0} bytes is larger than {MAX_END_LEN}")]
    EndTooLarge(u64),
    /// An `end` frame whose body is not a run.
    #[error("log `end` frame does not hold a run")]
    BadEnd(#[source] serde_json::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Chunk { offset: u64, remaining: u64 },
    End { len: usize },
}

/// A streaming decoder: [`push`](Decoder::push) bytes as they arrive, in pieces of any size,
/// and take frames with [`next_frame`](Decoder::next_frame) until it says `None`.
///
/// Bytes pushed with [`push_bytes`](Decoder::push_bytes) are not copied: a chunk's data is a
/// slice of them. Only a header or an `end` body split across pushes is gathered into a small
/// buffer, and a header's newline is looked for once in each byte.
#[derive(Debug)]
pub struct Decoder {
    /// Pushed bytes not yet decoded.
    input: Bytes,
    /// The start of a header or an `end` body that the input ended inside.
    partial: BytesMut,
    state: State,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder expecting a header.
    pub fn new() -> Self {
        Decoder {
            input: Bytes::new(),
            partial: BytesMut::new(),
            state: State::Header,
        }
    }

    /// Add bytes read from the stream (copied; [`push_bytes`](Decoder::push_bytes) is not).
    pub fn push(&mut self, data: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(data));
    }

    /// Add bytes read from the stream without copying them when the decoder has taken
    /// every frame from what was pushed before.
    pub fn push_bytes(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        if self.input.is_empty() {
            self.input = data;
        } else {
            let mut joined = BytesMut::with_capacity(self.input.len() + data.len());
            joined.extend_from_slice(&self.input);
            joined.extend_from_slice(&data);
            self.input = joined.freeze();
        }
    }

    /// Whether the decoder is between frames with nothing buffered: a stream that ends here
    /// ended cleanly.
    pub fn is_idle(&self) -> bool {
        self.state == State::Header && self.input.is_empty() && self.partial.is_empty()
    }

    /// The next frame, `Ok(None)` when more bytes are needed first.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        loop {
            match self.state {
                State::Header => {
                    let Some(line) = self.header_line()? else {
                        return Ok(None);
                    };
                    match parse_header(&line[..line.len() - 1])? {
                        // An empty chunk says nothing; keep reading.
                        Header::Chunk { len: 0, .. } => {}
                        Header::Chunk { offset, len } => {
                            self.state = State::Chunk {
                                offset,
                                remaining: len,
                            };
                        }
                        Header::Beat => return Ok(Some(Frame::Beat)),
                        Header::Tail { offset } => return Ok(Some(Frame::Tail { offset })),
                        Header::End { len } => {
                            if len > MAX_END_LEN {
                                return Err(FrameError::EndTooLarge(len));
                            }
                            self.state = State::End {
                                len: usize::try_from(len).expect("at most MAX_END_LEN"),
                            };
                        }
                    }
                }
                State::Chunk { offset, remaining } => {
                    if self.input.is_empty() {
                        return Ok(None);
                    }
                    let take = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(self.input.len());
                    let data = self.input.split_to(take);
                    let left = remaining - take as u64;
                    self.state = if left == 0 {
                        State::Header
                    } else {
                        State::Chunk {
                            offset: offset + take as u64,
                            remaining: left,
                        }
                    };
                    return Ok(Some(Frame::Chunk { offset, data }));
                }
                State::End { len } => {
                    let want = len - self.partial.len();
                    if self.input.len() < want {
                        self.partial.extend_from_slice(&self.input);
                        self.input.clear();
                        return Ok(None);
                    }
                    let rest = self.input.split_to(want);
                    let run: Result<Run, _> = if self.partial.is_empty() {
                        serde_json::from_slice(&rest)
                    } else {
                        self.partial.extend_from_slice(&rest);
                        let body = self.partial.split();
                        serde_json::from_slice(&body)
                    };
                    self.state = State::Header;
                    let run = run.map_err(FrameError::BadEnd)?;
                    return Ok(Some(Frame::End(Box::new(run))));
                }
            }
        }
    }

    /// The next header line, newline included, once it is whole. The input is searched
    /// once: what came before is kept in `partial`, at most [`MAX_HEADER_LEN`] bytes.
    fn header_line(&mut self) -> Result<Option<Bytes>, FrameError> {
        let room = MAX_HEADER_LEN - self.partial.len();
        let window = &self.input[..self.input.len().min(room)];
        match window.iter().position(|&b| b == b'\n') {
            Some(nl) => {
                let line = self.input.split_to(nl + 1);
                if self.partial.is_empty() {
                    Ok(Some(line))
                } else {
                    self.partial.extend_from_slice(&line);
                    Ok(Some(self.partial.split().freeze()))
                }
            }
            None if window.len() == room => Err(FrameError::HeaderTooLong),
            None => {
                self.partial.extend_from_slice(&self.input);
                self.input.clear();
                Ok(None)
            }
        }
    }
}

enum Header {
    Chunk { offset: u64, len: u64 },
    Beat,
    Tail { offset: u64 },
    End { len: u64 },
}

fn parse_header(line: &[u8]) -> Result<Header, FrameError> {
    let bad = || FrameError::BadHeader(String::from_utf8_lossy(line).into_owned());
    let text = std::str::from_utf8(line).map_err(|_| bad())?;
    let mut words = text.split(' ');
    let number = |w: Option<&str>| -> Result<u64, FrameError> {
        let w = w.ok_or_else(bad)?;
        // Plain decimal digits only: no sign, no spaces.
        if w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        w.parse().map_err(|_| bad())
    };
    let header = match words.next() {
        Some("chunk") => {
            let offset = number(words.next())?;
            let len = number(words.next())?;
            offset.checked_add(len).ok_or_else(bad)?;
            Header::Chunk { offset, len }
        }
        Some("beat") => Header::Beat,
        Some("tail") => Header::Tail {
            offset: number(words.next())?,
        },
        Some("end") => Header::End {
            len: number(words.next())?,
        },
        _ => return Err(bad()),
    };
    if words.next().is_some() {
        return Err(bad());
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_a_slice_of_the_pushed_bytes_not_a_copy() {
        let wire = encode_chunk(0, &[b'x'; 1000]);
        let mut decoder = Decoder::new();
        decoder.push_bytes(wire.clone());
        let Ok(Some(Frame::Chunk { data, .. })) = decoder.next_frame() else {
            panic!("a chunk frame");
        };
        assert_eq!(data.len(), 1000);
        assert_eq!(data.as_ptr(), wire[wire.len() - 1000..].as_ptr());
        assert!(decoder.is_idle());
    }

    fn header_split(line_len: usize, split: usize) -> String {
        // `beat` padded with spaces is a bad header, but a whole one: it says the length was
        // accepted.
        let mut line = b"beat".to_vec();
        line.resize(line_len - 1, b' ');
        line.push(b'\n');
        let mut decoder = Decoder::new();
        decoder.push(&line[..split]);
        let first = decoder.next_frame();
        decoder.push(&line[split..]);
        match (first, decoder.next_frame()) {
            (Ok(None), Ok(frame)) => format!("{frame:?}"),
            (Ok(None), Err(e)) | (Err(e), _) => e.to_string(),
            (Ok(Some(frame)), _) => format!("early {frame:?}"),
        }
    }

    #[test]
    fn a_header_split_across_pushes_is_held_to_its_limit() {
        assert_eq!(header_split(5, 2), "Some(Beat)");
        assert!(header_split(MAX_HEADER_LEN, 30).starts_with("bad log frame header"));
        assert_eq!(
            header_split(MAX_HEADER_LEN + 1, 30),
            "log frame header longer than 64 bytes"
        );
        assert_eq!(
            header_split(MAX_HEADER_LEN + 1, 64),
            "log frame header longer than 64 bytes"
        );
    }
}
