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
//!
//! Here: the [`Unpacker`], which reads a layer's entries and hands each to its rule. The
//! rules and bounds are modules of their own, lowest first, each using only those before
//! it: `limits.rs` ([`UnpackLimits`], [`Limit`]), `error.rs` ([`UnpackError`]),
//! `budget.rs` (what the layers took so far), `paths.rs` (paths resolved inside the root),
//! `metadata.rs` (owners, modes, times), `tree.rs` (the tree being written), `whiteout.rs`,
//! and `kinds.rs` (what each kind of entry becomes).

mod budget;
mod error;
mod kinds;
mod limits;
mod metadata;
pub(crate) mod paths;
mod tree;
mod whiteout;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::entry::{Item, Kind};
use crate::hash::Hasher;
use crate::layers::{IndexEntry, LayerIndex, file_path};
use crate::reference::{Algorithm, Digest};
use crate::unpack::budget::Budget;
use crate::unpack::kinds::{Body, Written};
use crate::unpack::paths::clean;
use crate::unpack::tree::Tree;
use crate::unpack::whiteout::Whiteout;

pub use error::UnpackError;
pub use limits::{Limit, UnpackLimits};

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

/// Applies layers, in order, to one root directory.
#[derive(Debug)]
pub struct Unpacker {
    tree: Tree,
    budget: Budget,
    /// While a layer not yet in the layer store is applied: where its files are kept and
    /// its entries listed (`layers.rs`).
    record: Option<Recorder>,
}

/// What one layer's application keeps between its entries.
#[derive(Default)]
struct LayerState {
    stats: LayerStats,
    /// Paths this layer wrote, and their ancestors: whiteouts spare them.
    touched: HashSet<PathBuf>,
}

/// A layer's entries as they are applied, and the folder its files are linked into.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) files: PathBuf,
    pub(crate) entries: Vec<IndexEntry>,
    /// Bytes of the files kept (their blocks).
    pub(crate) stored: u64,
}

impl Recorder {
    fn push(&mut self, item: Item, written: Written) {
        self.stored += written.blocks * 512;
        self.entries.push(IndexEntry {
            item,
            size: written.bytes,
        });
    }
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
            tree: Tree::new(root.into()),
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
        self.budget.read()
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
        self.budget.start(self.tree.root())?;
        let mut stream = self.budget.stream(reader, algorithm.map(Hasher::new));
        let mut buf = vec![0u8; 64 << 10];
        let stats = self.entries(&mut stream, &mut buf).and_then(|stats| {
            // What follows the archive's end is part of the diff_id too (and bounded).
            io::copy(&mut stream, &mut io::sink()).map_err(UnpackError::Tar)?;
            Ok(stats)
        });
        self.budget.charge_stream(&stream)?;
        Ok((stats?, stream.digest()))
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
                .map(|r| file_path(&r.files, r.entries.len()));
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
        index: &LayerIndex,
        files: &Path,
    ) -> Result<LayerStats, UnpackError> {
        self.budget.start(self.tree.root())?;
        self.budget.charge_stored(index.read)?;
        let mut layer = LayerState::default();
        for (n, e) in index.entries.iter().enumerate() {
            let path = file_path(files, n);
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
        self.budget.charge(self.tree.root(), 0, 1)?;
        layer.stats.entries += 1;
        let name = String::from_utf8_lossy(&item.path).into_owned();
        let parts = clean(Path::new(OsStr::from_bytes(&item.path)));
        let Some((file, parent)) = parts.split_last() else {
            // The root itself: only its mode and time matter.
            if item.kind == Kind::Dir {
                let mode = item.mode.unwrap_or(0o755);
                self.tree
                    .dirs
                    .set(PathBuf::new(), mode & 0o7777, item.mtime);
            }
            return Ok(Written::default());
        };
        if let Some(hidden) = whiteout::hidden(&file.to_string_lossy()) {
            match whiteout::apply(&mut self.tree, parent, hidden, &name, &layer.touched)? {
                Whiteout::Applied => layer.stats.whiteouts += 1,
                Whiteout::ThroughSymlink => layer.stats.skipped_whiteouts += 1,
            }
            return Ok(Written::default());
        }
        let (dir, _) = self.tree.resolve(parent, &name)?;
        let rel = dir.join(file);
        self.tree.make_parents(&dir)?;
        let mut p = rel.clone();
        while layer.touched.insert(p.clone()) && p.pop() {}
        let mode = item.mode.unwrap_or(0o644) & 0o7777;
        let tree = &mut self.tree;
        match item.kind {
            Kind::Dir => kinds::make_dir(tree, &rel, item, mode).map(|()| Written::default()),
            Kind::File => kinds::make_file(tree, &mut self.budget, &rel, item, mode, body, buf),
            Kind::Symlink => kinds::make_symlink(tree, &rel, item).map(|()| Written::default()),
            Kind::Link => kinds::make_link(tree, &rel, item, &name).map(|()| Written::default()),
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

    /// Sets directories' final modes and times, deepest first. Call once after the last layer.
    pub fn finish(self) -> Result<(), UnpackError> {
        self.tree.dirs.apply(self.tree.root())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::inflate::decompress;
    use crate::manifest::Compression;

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
