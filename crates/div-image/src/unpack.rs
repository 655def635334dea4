//! Applying layers to a root filesystem: in order, with whiteouts, never outside the root.
//!
//! The rules (docs/images.md says why each holds):
//! - An entry's path is cleaned lexically (`/a/../../b` is `b`: `..` stops at the root).
//! - Its parent directories are resolved inside the root: a symlink among them is followed
//!   as if the root were `/`, so `lib -> /usr/lib` puts `lib/x` at `usr/lib/x` and nothing
//!   lands outside. The entry's own name is never followed.
//! - `.wh.NAME` removes `NAME` from lower layers; `.wh..wh..opq` empties its directory of
//!   what lower layers put there. Either is recognised by name, whatever the entry's type (a
//!   whiteout arriving as a hard link is still a whiteout). Neither removes what the same
//!   layer added. A whiteout whose parent path goes through a symlink is ignored.
//! - A directory entry where a directory already is keeps the directory and its contents.
//! - Device nodes and FIFOs are skipped; ownership is set where the process may (root), and
//!   failed chowns are ignored otherwise.
//!
//! And the bounds ([`UnpackLimits`]), all layers of an image together: the bytes of files
//! written and the decompressed bytes read, the entries, and the free space of the
//! filesystem less a margin. Each is checked before the bytes or the entry that would pass
//! it are written. [`Unpacker::apply_hashed`] also hashes the whole decompressed stream as
//! it is read: the layer's diff_id.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use crate::manifest::Compression;
use crate::reference::{Algorithm, Digest};
use crate::registry::Hasher;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";
const MAX_LINKS: u32 = 255;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What each entry is counted as against the free space, besides its contents: a block
/// (a folder's, an inode's and its name's share).
const ENTRY_BYTES: u64 = 4096;

/// How often (in bytes counted against the free space) the filesystem is asked again how
/// much is free: what other writers took meanwhile is seen within this much.
const FREE_CHECK_EVERY: u64 = 8 * MIB;

/// Bounds on what unpacking an image may take, all its layers together (docs/images.md,
/// Limits). A layer that would pass one fails with [`UnpackError::Limit`] before the byte or
/// the entry that passes it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// The most bytes an image unpacks to: the contents of the files written, and also the
    /// decompressed bytes read (a tar stream's headers, data skipped, what follows its end),
    /// each held to it. Default [`UnpackLimits::DEFAULT_MAX_BYTES`], 64 GiB.
    pub max_bytes: u64,
    /// The most tar entries (files, folders, links, whiteouts…) an image holds. Default
    /// [`UnpackLimits::DEFAULT_MAX_ENTRIES`], one million.
    pub max_entries: u64,
    /// Bytes of the filesystem under the root that unpacking leaves free, for everything
    /// else written there; `None`: 1 GiB or 5 % of the filesystem's size, whichever is
    /// smaller ([`UnpackLimits::keep_free_of`]). Each entry counts as its contents and
    /// 4 KiB.
    pub keep_free: Option<u64>,
}

impl UnpackLimits {
    /// 64 GiB: several times the largest images in common use (a CUDA PyTorch runtime
    /// image unpacks to about 8 GiB).
    pub const DEFAULT_MAX_BYTES: u64 = 64 * GIB;
    /// One million entries: images of many GiB hold tens of thousands.
    pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;

    /// The bytes kept free on a filesystem of `size` bytes when [`keep_free`] is `None`:
    /// 1 GiB, or 5 % of a filesystem smaller than 20 GiB.
    ///
    /// [`keep_free`]: UnpackLimits::keep_free
    pub fn keep_free_of(size: u64) -> u64 {
        (size / 20).min(GIB)
    }
}

impl Default for UnpackLimits {
    fn default() -> UnpackLimits {
        UnpackLimits {
            max_bytes: UnpackLimits::DEFAULT_MAX_BYTES,
            max_entries: UnpackLimits::DEFAULT_MAX_ENTRIES,
            keep_free: None,
        }
    }
}

/// The limit an image's unpacking would have passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limit {
    /// [`UnpackLimits::max_bytes`].
    Size {
        /// The limit, in bytes.
        max: u64,
    },
    /// [`UnpackLimits::max_entries`].
    Entries {
        /// The limit.
        max: u64,
    },
    /// The filesystem's free space less what is kept free.
    FreeSpace {
        /// Bytes free when unpacking began, or, when others took space meanwhile, when
        /// the filesystem was last asked.
        available: u64,
        /// Bytes kept free.
        keep_free: u64,
    },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Size { max } => {
                write!(
                    f,
                    "the limit of {} on an image's unpacked size",
                    bytes(*max)
                )
            }
            Limit::Entries { max } => write!(
                f,
                "the limit of {max} entries (files, folders, links) in an image"
            ),
            Limit::FreeSpace {
                available,
                keep_free,
            } => write!(
                f,
                "the free space of the image cache's filesystem ({} free) less the {} kept free for everything else there",
                bytes(*available),
                bytes(*keep_free)
            ),
        }
    }
}

/// A size as people read it: `64 GiB`, `100 MiB`, `1.5 GiB`, `512 bytes`, in integers.
pub(crate) fn bytes(n: u64) -> String {
    for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")] {
        if n >= unit {
            if n.is_multiple_of(unit) {
                return format!("{} {name}", n / unit);
            }
            // Tenths, rounded down: never more than there is.
            let tenths = (u128::from(n) * 10 / u128::from(unit)) as u64;
            return format!("{}.{} {name}", tenths / 10, tenths % 10);
        }
    }
    format!("{n} bytes")
}

/// What applying one layer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Entries read from the tar stream.
    pub entries: u64,
    /// Whiteouts (plain and opaque) applied.
    pub whiteouts: u64,
    /// Device nodes and FIFOs skipped.
    pub skipped_devices: u64,
    /// Whiteouts ignored because their parent path went through a symlink.
    pub skipped_whiteouts: u64,
}

/// The error returned by [`Unpacker::apply`].
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The tar stream (or its compression) is broken.
    #[error("the layer is not a readable tar stream")]
    Tar(#[source] io::Error),
    /// An entry could not be written.
    #[error("cannot write `{path}` from the layer")]
    Write {
        /// The entry's path inside the image.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry is malformed (a hard link to nothing, too many symlinks…).
    #[error("the layer's entry `{path}` is invalid: {why}")]
    Invalid {
        /// The entry's path inside the image.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// The layer would pass one of the [`UnpackLimits`]; what it would have passed was not
    /// written.
    #[error("the layer unpacks past {0}")]
    Limit(Limit),
}

/// A layer's decompressed stream as the tar reader takes it: hashed, counted, and held to
/// what is left of the image's byte limit.
struct Stream<R> {
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
struct Budget {
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
    fn new(limits: UnpackLimits) -> Budget {
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

    /// Asks the filesystem under `root` how much is free, the first time.
    fn start(&mut self, root: &Path) -> Result<(), UnpackError> {
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

    /// Counts `bytes` of contents about to be written and `entries` about to be made;
    /// refuses them if they would pass a limit.
    fn charge(&mut self, root: &Path, bytes: u64, entries: u64) -> Result<(), UnpackError> {
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
    fn charge_linked(&mut self, bytes: u64) -> Result<(), UnpackError> {
        let written = self.written.saturating_add(bytes);
        if written > self.limits.max_bytes {
            return Err(UnpackError::Limit(Limit::Size {
                max: self.limits.max_bytes,
            }));
        }
        self.written = written;
        Ok(())
    }
}

/// Applies layers, in order, to one root directory.
#[derive(Debug)]
pub struct Unpacker {
    root: PathBuf,
    /// Final mode and mtime of each directory, applied last (a read-only directory would
    /// stop later layers from writing into it when not root).
    dirs: BTreeMap<PathBuf, (u32, u64)>,
    /// Paths known to be real directories (not symlinks): resolving skips their `lstat`.
    known: HashSet<PathBuf>,
    budget: Budget,
    /// While a layer not yet in the layer store is applied: where its files are kept and
    /// its entries listed (`layers.rs`).
    record: Option<Recorder>,
}

/// What a layer's entry is, as applying it needs (from a tar header, or a layer's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Dir,
    /// A regular file (sparse ones included).
    File,
    /// A symbolic link.
    Symlink,
    /// A hard link to an earlier entry.
    Link,
    /// A device node or FIFO: skipped.
    Device,
    /// Anything else tar holds: skipped.
    Other,
}

/// One entry of a layer, without its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) kind: Kind,
    /// The path as the tar stream has it (raw bytes, uncleaned).
    pub(crate) path: Vec<u8>,
    /// A link's target (raw bytes); empty for other kinds.
    pub(crate) link: Vec<u8>,
    /// The header's mode; `None` where it cannot be read.
    pub(crate) mode: Option<u32>,
    pub(crate) uid: u64,
    pub(crate) gid: u64,
    pub(crate) mtime: u64,
}

impl Item {
    fn of<R: Read>(entry: &tar::Entry<'_, R>) -> Item {
        let header = entry.header();
        use tar::EntryType as T;
        let kind = match header.entry_type() {
            T::Directory => Kind::Dir,
            T::Regular | T::Continuous | T::GNUSparse => Kind::File,
            T::Symlink => Kind::Symlink,
            T::Link => Kind::Link,
            T::Char | T::Block | T::Fifo => Kind::Device,
            _ => Kind::Other,
        };
        let link = match kind {
            Kind::Symlink | Kind::Link => entry
                .link_name_bytes()
                .map(|b| b.into_owned())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Item {
            kind,
            path: entry.path_bytes().into_owned(),
            link,
            mode: header.mode().ok(),
            uid: header.uid().unwrap_or(0),
            gid: header.gid().unwrap_or(0),
            mtime: header.mtime().unwrap_or(0),
        }
    }
}

/// Where a regular file's contents come from.
enum Body<'a> {
    /// The tar entry being read; with `keep`, the file made is also hard-linked there (a
    /// layer store's file).
    Stream {
        reader: &'a mut dyn Read,
        keep: Option<&'a Path>,
    },
    /// A layer store's file, hard-linked; `size`: its contents' bytes.
    Stored { path: &'a Path, size: u64 },
}

/// What one layer's application keeps between its entries.
#[derive(Default)]
struct LayerState {
    stats: LayerStats,
    /// Paths this layer wrote, and their ancestors: whiteouts spare them.
    touched: HashSet<PathBuf>,
}

/// A regular file written from a stream: its contents' bytes and its blocks (512 bytes).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Written {
    pub(crate) bytes: u64,
    pub(crate) blocks: u64,
}

/// A layer's entries as they are applied, and the folder its files are linked into.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) files: PathBuf,
    pub(crate) entries: Vec<crate::layers::IndexEntry>,
    /// Bytes of the files kept (their blocks).
    pub(crate) stored: u64,
}

impl Recorder {
    fn push(&mut self, item: Item, written: Written) {
        self.stored += written.blocks * 512;
        self.entries.push(crate::layers::IndexEntry {
            item,
            size: written.bytes,
        });
    }
}

fn display(rel: &Path) -> String {
    format!("/{}", rel.display())
}

/// The components of an archive path, `..` resolved lexically and clamped at the root.
fn clean(path: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n.to_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn join(parts: &[OsString]) -> PathBuf {
    parts.iter().collect()
}

fn lstat(p: &Path) -> Option<fs::Metadata> {
    fs::symlink_metadata(p).ok()
}

/// Removes whatever is at `p` without following a symlink there.
fn remove_any(p: &Path) -> io::Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            make_writable_tree(p);
            fs::remove_dir_all(p)
        }
        Ok(_) => fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Gives the owner rwx on every directory below `p` so that it can be removed when not root.
fn make_writable_tree(p: &Path) {
    if let Some(m) = lstat(p)
        && m.is_dir()
    {
        let mode = m.permissions().mode();
        if mode & 0o700 != 0o700 {
            let _ = fs::set_permissions(p, fs::Permissions::from_mode(mode | 0o700));
        }
        if let Ok(rd) = fs::read_dir(p) {
            for e in rd.flatten() {
                make_writable_tree(&e.path());
            }
        }
    }
}

/// Sets owner and group, ignoring a refusal (not root, or an id outside the user namespace).
fn chown(p: &Path, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Ok(());
    };
    match std::os::unix::fs::lchown(p, Some(uid), Some(gid)) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied
                || e.kind() == io::ErrorKind::InvalidInput
                || e.raw_os_error() == Some(1) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// `chown` of an open file, a refusal ignored as [`chown`] ignores it.
fn fchown(f: &fs::File, uid: u64, gid: u64) -> io::Result<()> {
    let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
        return Ok(());
    };
    match std::os::unix::fs::fchown(f, Some(uid), Some(gid)) {
        Ok(()) => Ok(()),
        Err(e)
            if e.kind() == io::ErrorKind::PermissionDenied
                || e.kind() == io::ErrorKind::InvalidInput
                || e.raw_os_error() == Some(1) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
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

impl Unpacker {
    /// Starts unpacking into `root`, an existing empty directory, within the default
    /// [`UnpackLimits`].
    pub fn new(root: impl Into<PathBuf>) -> Unpacker {
        Unpacker::with_limits(root, UnpackLimits::default())
    }

    /// Starts unpacking into `root`, an existing empty directory, within `limits` (all the
    /// layers applied together).
    pub fn with_limits(root: impl Into<PathBuf>, limits: UnpackLimits) -> Unpacker {
        Unpacker {
            root: root.into(),
            dirs: BTreeMap::new(),
            known: HashSet::new(),
            budget: Budget::new(limits),
            record: None,
        }
    }

    /// From now on, each regular file applied is also hard-linked into `files` (named by
    /// its entry's place in the layer) and every entry listed: the layer's store, taken
    /// back with [`take_record`](Unpacker::take_record).
    pub(crate) fn record_into(&mut self, files: PathBuf) {
        self.record = Some(Recorder {
            files,
            entries: Vec::new(),
            stored: 0,
        });
    }

    /// The layer recorded since [`record_into`](Unpacker::record_into); recording stops.
    pub(crate) fn take_record(&mut self) -> Option<Recorder> {
        self.record.take()
    }

    /// Decompressed bytes read so far, all layers together (a cached layer's stream
    /// counted as if read).
    pub(crate) fn read_so_far(&self) -> u64 {
        self.budget.read
    }

    fn resolve(&mut self, parts: &[OsString], name: &str) -> Result<(PathBuf, bool), UnpackError> {
        resolve_in_root(&self.root, parts, Some(&mut self.known)).map_err(|e| match e {
            Resolve::Loop => UnpackError::Invalid {
                path: name.to_owned(),
                why: "its parent directories go through more than 255 symlinks".to_owned(),
            },
            Resolve::Io(source) => UnpackError::Write {
                path: name.to_owned(),
                source,
            },
        })
    }

    /// Removes whatever is at `rel`, forgetting directories known below it.
    fn remove_at(&mut self, rel: &Path) -> io::Result<()> {
        let full = self.root.join(rel);
        if lstat(&full).is_some_and(|m| m.is_dir()) {
            self.known.retain(|k| !k.starts_with(rel));
        }
        remove_any(&full)
    }

    /// Applies one layer's tar stream (already decompressed), reading it to its end.
    pub fn apply(&mut self, reader: impl Read) -> Result<LayerStats, UnpackError> {
        self.apply_inner(reader, None).map(|(stats, _)| stats)
    }

    /// [`apply`](Unpacker::apply), and the digest of the whole stream read, with
    /// `algorithm`: the layer's diff_id, to compare with the one its image's config names.
    pub fn apply_hashed(
        &mut self,
        reader: impl Read,
        algorithm: Algorithm,
    ) -> Result<(LayerStats, Digest), UnpackError> {
        self.apply_inner(reader, Some(algorithm))
            .map(|(stats, d)| (stats, d.expect("a stream hashed has a digest")))
    }

    pub(crate) fn apply_inner(
        &mut self,
        reader: impl Read,
        algorithm: Option<Algorithm>,
    ) -> Result<(LayerStats, Option<Digest>), UnpackError> {
        self.budget.start(&self.root)?;
        let mut stream = Stream {
            inner: reader,
            hasher: algorithm.map(Hasher::new),
            read: 0,
            allowance: self
                .budget
                .limits
                .max_bytes
                .saturating_sub(self.budget.read),
            over: false,
        };
        let mut buf = vec![0u8; 64 << 10];
        let stats = self.entries(&mut stream, &mut buf).and_then(|stats| {
            // What follows the archive's end is part of the diff_id too (and bounded).
            io::copy(&mut stream, &mut io::sink()).map_err(UnpackError::Tar)?;
            Ok(stats)
        });
        self.budget.read += stream.read;
        if stream.over {
            return Err(UnpackError::Limit(Limit::Size {
                max: self.budget.limits.max_bytes,
            }));
        }
        Ok((stats?, stream.hasher.map(Hasher::finish)))
    }

    fn entries(&mut self, reader: impl Read, buf: &mut [u8]) -> Result<LayerStats, UnpackError> {
        let mut archive = tar::Archive::new(reader);
        let mut layer = LayerState::default();
        for entry in archive.entries().map_err(UnpackError::Tar)? {
            let mut entry = entry.map_err(UnpackError::Tar)?;
            let item = Item::of(&entry);
            let keep = self
                .record
                .as_ref()
                .map(|r| crate::layers::file_path(&r.files, r.entries.len()));
            let written = self.apply_item(
                &item,
                Body::Stream {
                    reader: &mut entry,
                    keep: keep.as_deref(),
                },
                &mut layer,
                buf,
            )?;
            if let Some(record) = &mut self.record {
                record.push(item, written);
            }
        }
        Ok(layer.stats)
    }

    /// Applies a layer from the layer store: its entries in the order its tar stream had
    /// them, each regular file hard-linked from `files` (never written: the inode is the
    /// store's, shared with every image of the layer). The same rules as a tar stream, and
    /// the same bounds: the layer's stream length counts as read, each file's size as
    /// written (its blocks are already on disk, so only the entry counts against the free
    /// space).
    pub(crate) fn compose(
        &mut self,
        index: &crate::layers::LayerIndex,
        files: &Path,
    ) -> Result<LayerStats, UnpackError> {
        self.budget.start(&self.root)?;
        let read = self.budget.read.saturating_add(index.read);
        if read > self.budget.limits.max_bytes {
            return Err(UnpackError::Limit(Limit::Size {
                max: self.budget.limits.max_bytes,
            }));
        }
        self.budget.read = read;
        let mut layer = LayerState::default();
        for (n, e) in index.entries.iter().enumerate() {
            let path = crate::layers::file_path(files, n);
            let body = Body::Stored {
                path: &path,
                size: e.size,
            };
            self.apply_item(&e.item, body, &mut layer, &mut [])?;
        }
        Ok(layer.stats)
    }

    /// Applies one entry of a layer, whatever it is.
    fn apply_item(
        &mut self,
        item: &Item,
        body: Body<'_>,
        layer: &mut LayerState,
        buf: &mut [u8],
    ) -> Result<Written, UnpackError> {
        self.budget.charge(&self.root, 0, 1)?;
        layer.stats.entries += 1;
        let name = String::from_utf8_lossy(&item.path).into_owned();
        let parts = clean(Path::new(OsStr::from_bytes(&item.path)));
        let Some((file, parent)) = parts.split_last() else {
            // The root itself: only its mode and time matter.
            if item.kind == Kind::Dir {
                let mode = item.mode.unwrap_or(0o755);
                self.dirs
                    .insert(PathBuf::new(), (mode & 0o7777, item.mtime));
            }
            return Ok(Written::default());
        };
        let file_str = file.to_string_lossy();
        if let Some(hidden) = file_str.strip_prefix(WHITEOUT_PREFIX) {
            self.whiteout(parent, hidden, &name, layer)?;
            return Ok(Written::default());
        }
        let (dir, _) = self.resolve(parent, &name)?;
        let rel = dir.join(file);
        if !dir.as_os_str().is_empty() {
            let full = self.root.join(&dir);
            if !lstat(&full).is_some_and(|m| m.is_dir()) {
                fs::create_dir_all(&full).map_err(|source| UnpackError::Write {
                    path: display(&dir),
                    source,
                })?;
                let mut p = dir.clone();
                while !p.as_os_str().is_empty() && self.known.insert(p.clone()) {
                    p.pop();
                }
            }
        }
        let mut p = rel.clone();
        while layer.touched.insert(p.clone()) && p.pop() {}
        let mode = item.mode.unwrap_or(0o644) & 0o7777;
        match item.kind {
            Kind::Dir => self.make_dir(rel, item, mode).map(|()| Written::default()),
            Kind::File => self.make_file(&rel, item, mode, body, buf),
            Kind::Symlink => self.make_symlink(&rel, item).map(|()| Written::default()),
            Kind::Link => self
                .make_link(&rel, item, &name)
                .map(|()| Written::default()),
            Kind::Device => {
                layer.stats.skipped_devices += 1;
                Ok(Written::default())
            }
            Kind::Other => {
                tracing::debug!(entry = %name, "tar entry type skipped");
                Ok(Written::default())
            }
        }
    }

    /// `.wh.NAME` (removes `NAME`) or `.wh..wh..opq` (empties its directory), of what lower
    /// layers left; ignored where its parent path goes through a symlink.
    fn whiteout(
        &mut self,
        parent: &[OsString],
        hidden: &str,
        name: &str,
        layer: &mut LayerState,
    ) -> Result<(), UnpackError> {
        let (dir, via_symlink) = self.resolve(parent, name)?;
        if via_symlink {
            tracing::warn!(entry = %name, "whiteout through a symlink ignored");
            layer.stats.skipped_whiteouts += 1;
            return Ok(());
        }
        layer.stats.whiteouts += 1;
        let write = |source| UnpackError::Write {
            path: name.to_owned(),
            source,
        };
        if hidden == &OPAQUE[WHITEOUT_PREFIX.len()..] {
            let full = self.root.join(&dir);
            if lstat(&full).is_some_and(|m| m.is_dir()) {
                self.remove_lower_children(&dir, &layer.touched)
                    .map_err(write)?;
            }
        } else if !hidden.is_empty() && hidden != "." && hidden != ".." {
            self.remove_lower(&dir.join(hidden), &layer.touched)
                .map_err(write)?;
        }
        Ok(())
    }

    /// A directory: kept with its contents where one is, its mode and time set last.
    fn make_dir(&mut self, rel: PathBuf, item: &Item, mode: u32) -> Result<(), UnpackError> {
        let dest = self.root.join(&rel);
        let write = |source| UnpackError::Write {
            path: display(&rel),
            source,
        };
        let existing = lstat(&dest);
        if !existing.as_ref().is_some_and(|m| m.is_dir()) {
            self.remove_at(&rel).map_err(write)?;
            fs::create_dir(&dest).map_err(write)?;
        }
        chown(&dest, item.uid, item.gid).map_err(write)?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode | 0o700)).map_err(write)?;
        self.known.insert(rel.clone());
        self.dirs.insert(rel, (mode, item.mtime));
        Ok(())
    }

    /// A regular file: whatever was at its path is unlinked first (never written in place:
    /// it may be an inode other trees share), then the file is made anew from the stream,
    /// or hard-linked from the layer store.
    fn make_file(
        &mut self,
        rel: &Path,
        item: &Item,
        mode: u32,
        body: Body<'_>,
        buf: &mut [u8],
    ) -> Result<Written, UnpackError> {
        let dest = self.root.join(rel);
        let write = |source| UnpackError::Write {
            path: display(rel),
            source,
        };
        self.remove_at(rel).map_err(write)?;
        self.dirs.remove(rel);
        let (reader, keep) = match body {
            Body::Stored { path, size } => {
                self.budget.charge_linked(size)?;
                fs::hard_link(path, &dest).map_err(write)?;
                return Ok(Written::default());
            }
            Body::Stream { reader, keep } => (reader, keep),
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dest)
            .map_err(write)?;
        // Counted before each write: a sparse entry's holes are written as zeros, so what
        // is written can be more than the stream carries.
        let mut bytes = 0u64;
        loop {
            let n = match reader.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(UnpackError::Tar(e)),
            };
            self.budget.charge(&self.root, n as u64, 0)?;
            io::Write::write_all(&mut f, &buf[..n]).map_err(write)?;
            bytes += n as u64;
        }
        fchown(&f, item.uid, item.gid).map_err(write)?;
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(write)?;
        let t = filetime::FileTime::from_unix_time(item.mtime as i64, 0);
        filetime::set_file_handle_times(&f, Some(t), Some(t)).map_err(write)?;
        let Some(keep) = keep else {
            return Ok(Written { bytes, blocks: 0 });
        };
        let blocks = f.metadata().map_err(write)?.blocks();
        drop(f);
        fs::hard_link(&dest, keep).map_err(write)?;
        Ok(Written { bytes, blocks })
    }

    fn make_symlink(&mut self, rel: &Path, item: &Item) -> Result<(), UnpackError> {
        let dest = self.root.join(rel);
        let write = |source| UnpackError::Write {
            path: display(rel),
            source,
        };
        self.remove_at(rel).map_err(write)?;
        self.dirs.remove(rel);
        std::os::unix::fs::symlink(OsStr::from_bytes(&item.link), &dest).map_err(write)?;
        chown(&dest, item.uid, item.gid).map_err(write)?;
        let t = filetime::FileTime::from_unix_time(item.mtime as i64, 0);
        filetime::set_symlink_file_times(&dest, t, t).map_err(write)
    }

    /// A hard link to a file an earlier entry made, resolved inside the root like any path.
    fn make_link(&mut self, rel: &Path, item: &Item, name: &str) -> Result<(), UnpackError> {
        let dest = self.root.join(rel);
        let tparts = clean(Path::new(OsStr::from_bytes(&item.link)));
        let Some((tfile, tparent)) = tparts.split_last() else {
            return Err(UnpackError::Invalid {
                path: display(rel),
                why: "a hard link to the root".to_owned(),
            });
        };
        let (tdir, _) = self.resolve(tparent, name)?;
        let source = self.root.join(tdir.join(tfile));
        match lstat(&source) {
            None => {
                return Err(UnpackError::Invalid {
                    path: display(rel),
                    why: format!(
                        "a hard link to `{}`, which no earlier entry created",
                        String::from_utf8_lossy(&item.link)
                    ),
                });
            }
            Some(m) if m.is_dir() => {
                return Err(UnpackError::Invalid {
                    path: display(rel),
                    why: "a hard link to a directory".to_owned(),
                });
            }
            Some(_) => {}
        }
        if source == dest {
            return Ok(());
        }
        let write = |source| UnpackError::Write {
            path: display(rel),
            source,
        };
        self.remove_at(rel).map_err(write)?;
        self.dirs.remove(rel);
        fs::hard_link(&source, &dest).map_err(write)
    }

    /// Removes `rel` unless this layer wrote it; where this layer wrote inside it, removes
    /// only what lower layers left there.
    fn remove_lower(&mut self, rel: &Path, touched: &HashSet<PathBuf>) -> io::Result<()> {
        let full = self.root.join(rel);
        let Some(meta) = lstat(&full) else {
            return Ok(());
        };
        if !touched.contains(rel) {
            self.dirs.retain(|k, _| !k.starts_with(rel));
            return self.remove_at(rel);
        }
        if meta.is_dir() {
            self.remove_lower_children(rel, touched)?;
        }
        Ok(())
    }

    fn remove_lower_children(&mut self, rel: &Path, touched: &HashSet<PathBuf>) -> io::Result<()> {
        let full = self.root.join(rel);
        let mut names: Vec<OsString> = fs::read_dir(&full)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for n in names {
            self.remove_lower(&rel.join(n), touched)?;
        }
        Ok(())
    }

    /// Sets directories' final modes and times, deepest first. Call once after the last layer.
    pub fn finish(self) -> Result<(), UnpackError> {
        for (rel, (mode, mtime)) in self.dirs.iter().rev() {
            let full = self.root.join(rel);
            // Only a directory that is still a directory (never through a symlink).
            if !lstat(&full).is_some_and(|m| m.is_dir()) {
                continue;
            }
            let write = |source| UnpackError::Write {
                path: display(rel),
                source,
            };
            fs::set_permissions(&full, fs::Permissions::from_mode(*mode)).map_err(write)?;
            let t = filetime::FileTime::from_unix_time(*mtime as i64, 0);
            filetime::set_symlink_file_times(&full, t, t).map_err(write)?;
        }
        Ok(())
    }
}

pub(crate) enum Resolve {
    Loop,
    Io(io::Error),
}

/// Resolves `parts` inside `root`, following symlinks as if `root` were `/`: the result
/// never leaves it. Returns the resolved relative path and whether a symlink was followed.
pub(crate) fn resolve_in_root(
    root: &Path,
    parts: &[OsString],
    mut known: Option<&mut HashSet<PathBuf>>,
) -> Result<(PathBuf, bool), Resolve> {
    let mut stack: Vec<OsString> = Vec::new();
    let mut pending: VecDeque<OsString> = parts.iter().cloned().collect();
    let mut links = 0u32;
    let mut via_symlink = false;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            stack.pop();
            continue;
        }
        if c.is_empty() || c == "." {
            continue;
        }
        stack.push(c);
        let rel = join(&stack);
        if known.as_ref().is_some_and(|k| k.contains(&rel)) {
            continue;
        }
        let here = root.join(&rel);
        let Some(meta) = lstat(&here) else { continue };
        if !meta.file_type().is_symlink() {
            if meta.is_dir()
                && let Some(k) = known.as_mut()
            {
                k.insert(rel);
            }
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(Resolve::Loop);
        }
        via_symlink = true;
        let target = fs::read_link(&here).map_err(Resolve::Io)?;
        stack.pop();
        if target.is_absolute() {
            stack.clear();
        }
        let mut next: VecDeque<OsString> = VecDeque::new();
        for tc in target.components() {
            match tc {
                Component::Normal(n) => next.push_back(n.to_owned()),
                Component::ParentDir => next.push_back("..".into()),
                _ => {}
            }
        }
        next.extend(pending);
        pending = next;
    }
    Ok((join(&stack), via_symlink))
}

/// Reads a regular file of an unpacked tree, at most `max` bytes, resolving its path inside
/// `root` (a symlinked `/etc/passwd` pointing at the host's is read inside the tree).
pub(crate) fn read_in_root(root: &Path, path: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let parts = clean(Path::new(path));
    let (rel, _) = resolve_in_root(root, &parts, None).map_err(|e| match e {
        Resolve::Loop => io::Error::other("too many symlinks"),
        Resolve::Io(e) => e,
    })?;
    let full = root.join(rel);
    match lstat(&full) {
        Some(m) if m.is_file() => {
            let mut out = Vec::new();
            fs::File::open(&full)?.take(max).read_to_end(&mut out)?;
            Ok(Some(out))
        }
        _ => Ok(None),
    }
}

/// Total bytes of the files under `p` (each hard-linked inode once), without following
/// symlinks.
pub(crate) fn tree_size(p: &Path) -> u64 {
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>) -> u64 {
        let Some(m) = lstat(p) else { return 0 };
        if m.is_dir() {
            let mut total = m.blocks() * 512;
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    total += walk(&e.path(), seen);
                }
            }
            total
        } else if seen.insert((m.dev(), m.ino())) {
            m.blocks() * 512
        } else {
            0
        }
    }
    walk(p, &mut HashSet::new())
}

/// An unpacked tree's sizes on disk, in bytes of blocks, each inode once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeSizes {
    /// Everything the tree holds.
    pub(crate) total: u64,
    /// What it alone holds: directories, symlinks, and files whose every link is inside
    /// it (the others are shared with the layer store, and go only with their last link).
    pub(crate) own: u64,
}

/// The sizes of the tree under `p`, without following symlinks.
pub(crate) fn tree_sizes(p: &Path) -> TreeSizes {
    /// Per inode met: its blocks' bytes, its link count, and the links met in the tree.
    type Inodes = std::collections::HashMap<(u64, u64), (u64, u64, u64)>;
    fn walk(p: &Path, dirs: &mut u64, inodes: &mut Inodes) {
        let Some(m) = lstat(p) else { return };
        if m.is_dir() {
            *dirs += m.blocks() * 512;
            if let Ok(rd) = fs::read_dir(p) {
                for e in rd.flatten() {
                    walk(&e.path(), dirs, inodes);
                }
            }
        } else {
            inodes
                .entry((m.dev(), m.ino()))
                .or_insert((m.blocks() * 512, m.nlink(), 0))
                .2 += 1;
        }
    }
    let (mut dirs, mut inodes) = (0, Inodes::new());
    walk(p, &mut dirs, &mut inodes);
    let mut sizes = TreeSizes {
        total: dirs,
        own: dirs,
    };
    for (bytes, nlink, met) in inodes.into_values() {
        sizes.total += bytes;
        if met >= nlink {
            sizes.own += bytes;
        }
    }
    sizes
}

pub(crate) fn remove_tree(p: &Path) -> io::Result<()> {
    remove_any(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_read_them() {
        for (n, text) in [
            (64 << 30, "64 GiB"),
            (100 << 20, "100 MiB"),
            (1536 << 20, "1.5 GiB"),
            ((1 << 30) - 1, "1023.9 MiB"),
            (1536, "1.5 KiB"),
            (512, "512 bytes"),
            (0, "0 bytes"),
        ] {
            assert_eq!(bytes(n), text, "{n}");
        }
        assert_eq!(
            Limit::FreeSpace {
                available: 3 << 30,
                keep_free: 1 << 30
            }
            .to_string(),
            "the free space of the image cache's filesystem (3 GiB free) less the 1 GiB kept free for everything else there"
        );
    }

    #[test]
    fn gzip_and_zstd_layers_unpack() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o640);
        b.append_data(&mut h, "hello", &b"world"[..]).unwrap();
        let raw = b.into_inner().unwrap();
        let zst = ruzstd::encoding::compress_to_vec(
            &raw[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &raw).unwrap();
        let gz = gz.finish().unwrap();
        for (data, c) in [
            (zst, Compression::Zstd),
            (gz, Compression::Gzip),
            (raw, Compression::None),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut u = Unpacker::new(dir.path());
            u.apply(decompress(&data[..], c).unwrap()).unwrap();
            u.finish().unwrap();
            let p = dir.path().join("hello");
            assert_eq!(fs::read(&p).unwrap(), b"world", "{c:?}");
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o640
            );
        }
    }
}
