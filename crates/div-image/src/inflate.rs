//! Layers decompressed and hashed on threads of their own, ahead of the thread that applies
//! them.
//!
//! Unpacking is CPU-bound in two halves: inflating the blob and hashing what comes out (the
//! diff_id), and parsing the tar stream and writing its files. Here the first half runs on
//! worker threads that take the layers in order, each pushing its layer's stream through a
//! bounded channel of its own; the applier reads the channels in order, so layer N+1 is
//! being decompressed while layer N is written, and a layer's own decompression runs beside
//! its writing. Memory is bounded by the channels ([`CHUNK`] × [`CHUNKS`] a layer), and
//! nothing is ever written by a worker: the bounds, the order of the layers and what the
//! tree becomes stay with the one applier.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

use crate::hash::Hasher;
use crate::manifest::Compression;
use crate::reference::{Algorithm, Digest};

/// Bytes a worker reads from its decompressor at once, and sends as one message.
const CHUNK: usize = 256 << 10;
/// Chunks a layer's channel holds before its worker waits: 8 MiB ahead of the applier.
const CHUNKS: usize = 32;
/// Workers at most, whatever the machine.
const MAX_WORKERS: usize = 4;

/// One layer to decompress.
#[derive(Debug)]
pub(crate) struct Job {
    /// Its blob.
    pub(crate) path: PathBuf,
    pub(crate) compression: Compression,
    /// Hash the decompressed stream with this algorithm (its diff_id); `None` where the
    /// stream is the blob, already verified.
    pub(crate) hash: Option<Algorithm>,
    /// The most decompressed bytes sent: past it the worker stops with an error. The
    /// applier counts the image's bytes itself (all layers, in order) and stops first; this
    /// keeps a worker running ahead from decompressing a bomb without end.
    pub(crate) cap: u64,
}

enum Msg {
    Data(Vec<u8>),
    End(Option<Digest>),
    Fail(io::Error),
}

/// One layer's decompressed stream, as the worker sends it.
#[derive(Debug)]
pub(crate) struct LayerReader {
    rx: Receiver<Msg>,
    chunk: Vec<u8>,
    pos: usize,
    ended: bool,
    digest: Option<Digest>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Data(d) => write!(f, "Data({} bytes)", d.len()),
            Msg::End(d) => write!(f, "End({d:?})"),
            Msg::Fail(e) => write!(f, "Fail({e})"),
        }
    }
}

impl LayerReader {
    /// The digest of the whole stream, once it was read to its end (`None` before, or for
    /// a job that was not hashed).
    pub(crate) fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }
}

impl Read for LayerReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.pos < self.chunk.len() {
                let n = buf.len().min(self.chunk.len() - self.pos);
                buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
                self.pos += n;
                return Ok(n);
            }
            if self.ended {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Msg::Data(chunk)) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Ok(Msg::End(digest)) => {
                    self.ended = true;
                    self.digest = digest;
                }
                Ok(Msg::Fail(e)) => return Err(e),
                Err(_) => {
                    return Err(io::Error::other(
                        "the thread decompressing the layer stopped",
                    ));
                }
            }
        }
    }
}

/// Starts decompressing `jobs`, in order, on up to `workers` threads (at least one, at most
/// [`MAX_WORKERS`]); returns each job's stream, in the same order. Dropping a reader stops
/// its job; the threads end when every job is done or dropped.
pub(crate) fn start(jobs: Vec<Job>, workers: usize) -> Vec<LayerReader> {
    let mut readers = Vec::with_capacity(jobs.len());
    let mut queue = VecDeque::with_capacity(jobs.len());
    for job in jobs {
        let (tx, rx) = sync_channel(CHUNKS);
        queue.push_back((job, tx));
        readers.push(LayerReader {
            rx,
            chunk: Vec::new(),
            pos: 0,
            ended: false,
            digest: None,
        });
    }
    let threads = workers.clamp(1, MAX_WORKERS).min(queue.len());
    let queue = Arc::new(Mutex::new(queue));
    for _ in 0..threads {
        let queue = Arc::clone(&queue);
        std::thread::spawn(move || {
            // Jobs are taken in order, so the lowest layer not yet done always has a
            // worker: the applier, reading in order, never waits on a job nobody runs.
            while let Some((job, tx)) = queue.lock().ok().and_then(|mut q| q.pop_front()) {
                run(&job, &tx);
            }
        });
    }
    readers
}

/// Wraps a layer blob in its decompressor.
pub(crate) fn decompress<'r>(
    reader: impl Read + 'r,
    compression: Compression,
) -> io::Result<Box<dyn Read + 'r>> {
    Ok(match compression {
        Compression::None => Box::new(reader),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(reader)),
        Compression::Zstd => Box::new(
            ruzstd::decoding::StreamingDecoder::new(reader)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        ),
    })
}

/// Decompresses one job into its channel; a send that fails (its reader dropped) ends it.
fn run(job: &Job, tx: &SyncSender<Msg>) {
    let mut reader = match fs::File::open(&job.path)
        .and_then(|f| decompress(io::BufReader::new(f), job.compression))
    {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Msg::Fail(e));
            return;
        }
    };
    let mut hasher = job.hash.map(Hasher::new);
    let mut sent = 0u64;
    loop {
        let mut chunk = vec![0u8; CHUNK];
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Msg::Fail(e));
                return;
            }
        };
        chunk.truncate(n);
        if let Some(h) = &mut hasher {
            h.update(&chunk);
        }
        sent += n as u64;
        if tx.send(Msg::Data(chunk)).is_err() {
            return;
        }
        if sent > job.cap {
            let _ = tx.send(Msg::Fail(io::Error::other(
                "the layer decompresses past the image's byte limit",
            )));
            return;
        }
    }
    let _ = tx.send(Msg::End(hasher.map(Hasher::finish)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut e, data).expect("gzip");
        e.finish().expect("gzip")
    }

    #[test]
    fn layers_come_back_whole_in_order_with_their_digests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut jobs = Vec::new();
        let mut want = Vec::new();
        for i in 0..5u8 {
            let data: Vec<u8> = (0..(CHUNK * 3 + 17 * usize::from(i)))
                .map(|n| (n % 251) as u8 ^ i)
                .collect();
            let path = dir.path().join(format!("{i}.gz"));
            fs::write(&path, gz(&data)).expect("write");
            jobs.push(Job {
                path,
                compression: Compression::Gzip,
                hash: Some(Algorithm::Sha256),
                cap: u64::MAX,
            });
            want.push(data);
        }
        let readers = start(jobs, 3);
        for (mut r, data) in readers.into_iter().zip(want) {
            let mut got = Vec::new();
            r.read_to_end(&mut got).expect("read");
            assert_eq!(got, data);
            assert_eq!(r.digest(), Some(&Digest::sha256_of(&data)));
        }
    }

    #[test]
    fn a_broken_stream_or_one_past_its_cap_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broken = dir.path().join("broken.gz");
        let mut bytes = gz(&vec![7u8; CHUNK * 2]);
        bytes.truncate(bytes.len() / 2);
        fs::write(&broken, bytes).expect("write");
        let big = dir.path().join("big.gz");
        fs::write(&big, gz(&vec![0u8; CHUNK * 8])).expect("write");
        let jobs = vec![
            Job {
                path: broken,
                compression: Compression::Gzip,
                hash: None,
                cap: u64::MAX,
            },
            Job {
                path: big,
                compression: Compression::Gzip,
                hash: None,
                cap: CHUNK as u64 * 2,
            },
        ];
        for mut r in start(jobs, 1) {
            let mut sink = Vec::new();
            assert!(r.read_to_end(&mut sink).is_err());
            assert!(sink.len() <= CHUNK * 3, "{}", sink.len());
        }
    }
}
