//! A blob streamed to disk, its size and digest checked as it arrives; a cut stream resumed
//! from where it stopped (HTTP Range) or, where the registry ignores ranges, started over.
//! Nothing reaches its destination unverified.

use std::fs;
use std::io::Write as _;
use std::path::Path;

use futures_util::StreamExt as _;
use oci_client::client::BlobResponse;
use oci_client::manifest::OciDescriptor;

use crate::hash::Hasher;
use crate::manifest::Descriptor;
use crate::progress::{Progress, ProgressSink};
use crate::registry::Registry;
use crate::registry::error::{Failure, RegistryError};

/// A blob arriving in `partial`: what is written so far, and its running hash.
struct Download<'a> {
    desc: &'a Descriptor,
    partial: &'a Path,
    file: fs::File,
    hasher: Hasher,
    /// Bytes written and hashed.
    offset: u64,
}

impl<'a> Download<'a> {
    /// Starts `partial` empty.
    fn create(desc: &'a Descriptor, partial: &'a Path) -> Result<Download<'a>, RegistryError> {
        let file = Download::open(partial)?;
        Ok(Download {
            desc,
            partial,
            file,
            hasher: Hasher::new(desc.digest.algorithm()),
            offset: 0,
        })
    }

    fn open(partial: &Path) -> Result<fs::File, RegistryError> {
        fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(partial)
            .map_err(|source| io_error(partial, source))
    }

    /// Whether every byte the descriptor promises arrived.
    fn whole(&self) -> bool {
        self.offset >= self.desc.size
    }

    /// Throws away what arrived: the registry ignored the range asked for and sends the
    /// blob from its start.
    fn start_over(&mut self) -> Result<(), RegistryError> {
        self.file
            .set_len(0)
            .map_err(|source| io_error(self.partial, source))?;
        self.file = Download::open(self.partial)?;
        self.hasher = Hasher::new(self.desc.digest.algorithm());
        self.offset = 0;
        Ok(())
    }

    /// Whether `chunk` would take the blob past its size.
    fn too_long(&self, chunk: &[u8]) -> bool {
        self.offset + chunk.len() as u64 > self.desc.size
    }

    fn write(&mut self, chunk: &[u8]) -> Result<(), RegistryError> {
        self.hasher.update(chunk);
        self.file
            .write_all(chunk)
            .map_err(|source| io_error(self.partial, source))?;
        self.offset += chunk.len() as u64;
        Ok(())
    }

    /// Removes the partial file; returns `e`.
    fn discard(self, e: RegistryError) -> RegistryError {
        drop(self.file);
        let _ = fs::remove_file(self.partial);
        e
    }

    /// Judges what arrived, whole: synced, its digest checked, then renamed to `dest`.
    fn finish(self, dest: &Path, registry: &str) -> Result<(), RegistryError> {
        self.file
            .sync_all()
            .map_err(|source| io_error(self.partial, source))?;
        let actual = self.hasher.finish();
        drop(self.file);
        if actual != self.desc.digest {
            let _ = fs::remove_file(self.partial);
            return Err(RegistryError::DigestMismatch {
                registry: registry.to_owned(),
                expected: self.desc.digest.clone(),
                actual,
            });
        }
        fs::rename(self.partial, dest).map_err(|source| io_error(dest, source))
    }
}

fn io_error(path: &Path, source: std::io::Error) -> RegistryError {
    RegistryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How one attempt at a blob ended.
enum Attempt {
    /// Its stream ended, whole or cut short (with the error that cut it, if one did).
    Streamed(Option<String>),
    /// The request failed in a way worth another attempt.
    Transient(String),
    /// The pull is over; the partial file goes.
    Refused(RegistryError),
}

impl Registry {
    /// Downloads a blob to `dest` through `partial`, verifying size and digest as it streams;
    /// a cut stream resumes from where it stopped (HTTP Range) or, where the registry
    /// ignores ranges, starts over. Nothing reaches `dest` unverified.
    pub(crate) async fn fetch_blob(
        &self,
        desc: &Descriptor,
        partial: &Path,
        dest: &Path,
        index: usize,
        progress: &dyn ProgressSink,
    ) -> Result<(), RegistryError> {
        let registry = self.reference.registry();
        let mut download = Download::create(desc, partial)?;
        // Attempts in a row that brought nothing new, attempts in all, and what broke last.
        let (mut failures, mut attempts, mut last) = (0u32, 0u32, String::new());
        while !download.whole() {
            if failures >= self.options.attempts {
                return Err(download.discard(RegistryError::Incomplete {
                    registry: registry.to_owned(),
                    digest: desc.digest.clone(),
                    attempts,
                    last,
                }));
            }
            if failures > 0 {
                progress.event(&Progress::Retrying {
                    index,
                    digest: desc.digest.clone(),
                    offset: download.offset,
                    error: last.clone(),
                });
                self.pause(failures - 1).await;
            }
            attempts += 1;
            let before = download.offset;
            match self.attempt(&mut download, index, progress).await? {
                Attempt::Transient(m) => {
                    last = m;
                    failures += 1;
                    continue;
                }
                Attempt::Refused(e) => return Err(download.discard(e)),
                Attempt::Streamed(cut) => {
                    if let Some(m) = cut {
                        last = m;
                    }
                }
            }
            if !download.whole() {
                if last.is_empty() {
                    last = format!(
                        "the registry closed the blob at byte {} of {}",
                        download.offset, desc.size
                    );
                }
                if download.offset > before {
                    failures = 0;
                }
                failures += 1;
            }
        }
        download.finish(dest, registry)
    }

    /// One request for the rest of the blob, from `download.offset`, and its stream written
    /// as it arrives. An error returned (not an [`Attempt`]) leaves the partial file.
    async fn attempt(
        &self,
        download: &mut Download<'_>,
        index: usize,
        progress: &dyn ProgressSink,
    ) -> Result<Attempt, RegistryError> {
        let desc = download.desc;
        let oci_desc = OciDescriptor {
            media_type: desc.media_type.clone(),
            digest: desc.digest.to_string(),
            size: i64::try_from(desc.size).unwrap_or(i64::MAX),
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        let response = self
            .client
            .pull_blob_stream_partial(&self.reference.to_oci(), &oci_desc, download.offset, None)
            .await;
        let mut stream = match response {
            Err(e) => {
                return Ok(match self.classify(e) {
                    Failure::Transient(m) => Attempt::Transient(m),
                    Failure::Fatal(e) => Attempt::Refused(e),
                });
            }
            Ok(BlobResponse::Partial(s)) => s.stream,
            Ok(BlobResponse::Full(s)) => {
                if download.offset > 0 {
                    // The registry ignored the range: start over.
                    download.start_over()?;
                }
                s.stream
            }
        };
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                // The verifying stream fails at the end on a digest mismatch; that is
                // judged once the blob is whole, not retried.
                Err(e) => return Ok(Attempt::Streamed(Some(e.to_string()))),
            };
            if download.too_long(&chunk) {
                return Ok(Attempt::Refused(RegistryError::SizeMismatch {
                    registry: self.reference.registry().to_owned(),
                    digest: desc.digest.clone(),
                    expected: desc.size,
                    what: "larger",
                }));
            }
            download.write(&chunk)?;
            progress.event(&Progress::Bytes {
                index,
                digest: desc.digest.clone(),
                done: download.offset,
                total: desc.size,
            });
        }
        Ok(Attempt::Streamed(None))
    }
}
