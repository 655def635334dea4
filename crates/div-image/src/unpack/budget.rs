//! What an image's layers have taken so far, held to its [`UnpackLimits`]: the bytes
//! written, the decompressed bytes read (through a [`Stream`]), the entries, and the free
//! space of the filesystem less a margin. Each is checked before the bytes or the entry that
//! would pass it are written.

use std::io::{self, Read};
use std::path::Path;

use crate::hash::Hasher;
use crate::reference::Digest;
use crate::unpack::error::UnpackError;
use crate::unpack::limits::{Limit, MIB, UnpackLimits};

/// What each entry is counted as against the free space, besides its contents: a block
/// (a folder's, an inode's and its name's share).
const ENTRY_BYTES: u64 = 4096;

/// How often (in bytes counted against the free space) the filesystem is asked again how
/// much is free: what other writers took meanwhile is seen within this much.
const FREE_CHECK_EVERY: u64 = 8 * MIB;

/// A layer's decompressed stream as the tar reader takes it: hashed, counted, and held to
/// what is left of the image's byte limit.
pub(super) struct Stream<R> {
    inner: R,
    hasher: Option<Hasher>,
    read: u64,
    allowance: u64,
    over: bool,
}

impl<R: Read> Read for Stream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.allowance {
            self.over = true;
            return Err(io::Error::other("the image's byte limit is passed"));
        }
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
}

impl<R> Stream<R> {
    /// The digest of what was read, where it was hashed.
    pub(super) fn digest(self) -> Option<Digest> {
        self.hasher.map(Hasher::finish)
    }
}

/// The free space of the filesystem under the root, as unpacking began.
#[derive(Debug, Clone, Copy)]
struct Free {
    /// Bytes free when unpacking began.
    available: u64,
    /// Bytes kept free.
    keep_free: u64,
    /// What may be counted against it: free at the start less what is kept.
    allowed: u64,
    /// Asked again once [`Budget::disk`] reaches this.
    next_check: u64,
}

/// What an image's layers have taken so far, against [`UnpackLimits`].
#[derive(Debug)]
pub(super) struct Budget {
    limits: UnpackLimits,
    /// Bytes of file contents written.
    written: u64,
    /// Decompressed bytes read.
    read: u64,
    /// Entries.
    entries: u64,
    /// Bytes counted against the free space: contents, and [`ENTRY_BYTES`] an entry.
    disk: u64,
    /// `None` before the first layer, and on a filesystem that reports no size.
    free: Option<Free>,
    /// Whether the filesystem was asked yet.
    asked: bool,
}

/// Bytes free to an unprivileged writer on the filesystem under `p`, and its size; `None`
/// for one that reports no size (a pseudo filesystem).
fn free_space(p: &Path) -> io::Result<Option<(u64, u64)>> {
    let st = rustix::fs::statvfs(p)?;
    if st.f_blocks == 0 {
        return Ok(None);
    }
    Ok(Some((
        st.f_bavail.saturating_mul(st.f_frsize),
        st.f_blocks.saturating_mul(st.f_frsize),
    )))
}

impl Budget {
    pub(super) fn new(limits: UnpackLimits) -> Budget {
        Budget {
            limits,
            written: 0,
            read: 0,
            entries: 0,
            disk: 0,
            free: None,
            asked: false,
        }
    }

    /// Decompressed bytes read so far, all layers together.
    pub(super) fn read(&self) -> u64 {
        self.read
    }

    fn too_large(&self) -> UnpackError {
        UnpackError::Limit(Limit::Size {
            max: self.limits.max_bytes,
        })
    }

    /// Asks the filesystem under `root` how much is free, the first time.
    pub(super) fn start(&mut self, root: &Path) -> Result<(), UnpackError> {
        if self.asked {
            return Ok(());
        }
        self.asked = true;
        let space = free_space(root).map_err(|source| UnpackError::Write {
            path: "/".to_owned(),
            source,
        })?;
        self.free = space.map(|(available, size)| {
            let keep_free = self
                .limits
                .keep_free
                .unwrap_or_else(|| UnpackLimits::keep_free_of(size));
            Free {
                available,
                keep_free,
                allowed: available.saturating_sub(keep_free),
                next_check: FREE_CHECK_EVERY,
            }
        });
        Ok(())
    }

    /// `inner`, counted against what is left of the byte limit, and hashed where
    /// `hasher` is given.
    pub(super) fn stream<R: Read>(&self, inner: R, hasher: Option<Hasher>) -> Stream<R> {
        Stream {
            inner,
            hasher,
            read: 0,
            allowance: self.limits.max_bytes.saturating_sub(self.read),
            over: false,
        }
    }

    /// Counts what `stream` read; refuses it if it passed the byte limit.
    pub(super) fn charge_stream<R>(&mut self, stream: &Stream<R>) -> Result<(), UnpackError> {
        self.read += stream.read;
        if stream.over {
            return Err(self.too_large());
        }
        Ok(())
    }

    /// Counts a stored layer's stream, `read` bytes, as read; refuses it if it would pass
    /// the byte limit.
    pub(super) fn charge_stored(&mut self, read: u64) -> Result<(), UnpackError> {
        let read = self.read.saturating_add(read);
        if read > self.limits.max_bytes {
            return Err(self.too_large());
        }
        self.read = read;
        Ok(())
    }

    /// Counts `bytes` of contents about to be written and `entries` about to be made;
    /// refuses them if they would pass a limit.
    pub(super) fn charge(
        &mut self,
        root: &Path,
        bytes: u64,
        entries: u64,
    ) -> Result<(), UnpackError> {
        let limit = |l| Err(UnpackError::Limit(l));
        let written = self.written + bytes;
        if written > self.limits.max_bytes {
            return limit(Limit::Size {
                max: self.limits.max_bytes,
            });
        }
        let count = self.entries + entries;
        if count > self.limits.max_entries {
            return limit(Limit::Entries {
                max: self.limits.max_entries,
            });
        }
        let disk = self.disk + bytes + entries * ENTRY_BYTES;
        if let Some(free) = &mut self.free {
            if disk > free.allowed {
                return limit(Limit::FreeSpace {
                    available: free.available,
                    keep_free: free.keep_free,
                });
            }
            if disk >= free.next_check {
                // Others write to the same disk: what they took counts too.
                if let Ok(Some((available, _))) = free_space(root)
                    && available < free.keep_free.saturating_add(bytes)
                {
                    return limit(Limit::FreeSpace {
                        available,
                        keep_free: free.keep_free,
                    });
                }
                free.next_check = disk + FREE_CHECK_EVERY;
            }
        }
        self.written = written;
        self.entries = count;
        self.disk = disk;
        Ok(())
    }

    /// Counts `bytes` of a file linked from the layer store against the image's size
    /// (it takes no new space: its blocks are the store's).
    pub(super) fn charge_linked(&mut self, bytes: u64) -> Result<(), UnpackError> {
        let written = self.written.saturating_add(bytes);
        if written > self.limits.max_bytes {
            return Err(self.too_large());
        }
        self.written = written;
        Ok(())
    }
}
