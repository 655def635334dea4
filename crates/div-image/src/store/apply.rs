//! An image's layers applied, in order, into a new tree: each layer the layer store has
//! linked from there, each other one decompressed and hashed on threads of its own ahead of
//! its turn (`inflate.rs`), written into the tree and kept as a new layer store, its stream
//! checked against its diff_id.

use std::fs;
use std::path::{Path, PathBuf};

use crate::disk::{self, TreeSizes};
use crate::inflate;
use crate::layers::{self, LayerIndex};
use crate::manifest::Compression;
use crate::progress::{Progress, ProgressSink};
use crate::reference::{Digest, ImageRef};
use crate::store::error::{EnsureError, io_at};
use crate::store::{ImageStore, blob_path, blocking};
use crate::unpack::{UnpackError, Unpacker};

/// Directories a sandbox mounts over; created empty in a root filesystem that lacks them.
const MOUNT_POINTS: &[(&str, u32)] = &[
    ("proc", 0o555),
    ("dev", 0o755),
    ("sys", 0o555),
    ("tmp", 0o1777),
];

/// One layer to unpack: its blob, how it is compressed, and its diff_id from the config.
pub(super) struct Layer {
    pub(super) digest: Digest,
    pub(super) compression: Compression,
    pub(super) diff_id: Digest,
}

impl Layer {
    /// Whether its uncompressed stream is its blob (so its diff_id is its blob's digest).
    fn is_plain(&self) -> bool {
        self.compression == Compression::None && self.digest.algorithm() == self.diff_id.algorithm()
    }
}

/// What unpacking an image made: the mount points it added, the layers it unpacked anew
/// (each diff_id and its new store, in the work folder until it joins `layers/`), its
/// sizes.
pub(super) struct Unpacked {
    pub(super) added: Vec<String>,
    pub(super) fresh: Vec<(Digest, PathBuf)>,
    pub(super) sizes: TreeSizes,
}

/// Where a layer comes from.
enum Source {
    /// The layer store has it: linked from there.
    Stored(LayerIndex),
    /// Decompressed now, by the next of the readers.
    Fresh,
}

/// A layer's place in its image, for what its errors say.
struct LayerAt<'a> {
    reference: &'a ImageRef,
    index: usize,
    layers: usize,
    layer: &'a Layer,
}

impl LayerAt<'_> {
    fn error(&self, source: UnpackError) -> EnsureError {
        match source {
            UnpackError::Limit(limit) => EnsureError::TooLarge {
                reference: self.reference.to_string(),
                index: self.index + 1,
                layers: self.layers,
                layer: self.layer.digest.clone(),
                limit,
            },
            source => EnsureError::Unpack {
                reference: self.reference.to_string(),
                layer: self.layer.digest.clone(),
                source,
            },
        }
    }

    fn mismatch(&self, found: Digest) -> EnsureError {
        EnsureError::DiffIdMismatch {
            reference: self.reference.to_string(),
            index: self.index + 1,
            layers: self.layers,
            layer: self.layer.digest.clone(),
            expected: Box::new(self.layer.diff_id.clone()),
            found: Box::new(found),
        }
    }
}

/// Which of `layers` (blob digest, blob path, compression, diff_id) the layer store has, and
/// a decompression job for each of the others, in order; `cap`: the most bytes a job
/// decompresses.
fn plan(
    root: &Path,
    layers: &[(Digest, PathBuf, Compression, Digest)],
    cap: u64,
) -> (Vec<Source>, Vec<inflate::Job>) {
    let mut sources = Vec::with_capacity(layers.len());
    let mut jobs = Vec::new();
    for (digest, blob, compression, diff_id) in layers {
        if let Some(index) = layers::load(&layers::layer_dir(root, diff_id)) {
            sources.push(Source::Stored(index));
            continue;
        }
        let plain = *compression == Compression::None && digest.algorithm() == diff_id.algorithm();
        jobs.push(inflate::Job {
            path: blob.clone(),
            compression: *compression,
            hash: (!plain).then(|| diff_id.algorithm()),
            cap,
        });
        sources.push(Source::Fresh);
    }
    (sources, jobs)
}

/// Applies a layer the layer store has: its files linked from there.
async fn apply_stored(
    unpacker: Unpacker,
    index: LayerIndex,
    files: PathBuf,
    at: &LayerAt<'_>,
) -> Result<Unpacker, EnsureError> {
    let (unpacker, result) = blocking(move || {
        let mut unpacker = unpacker;
        let result = unpacker.compose(&index, &files);
        (unpacker, result)
    })
    .await;
    result.map_err(|e| at.error(e))?;
    Ok(unpacker)
}

/// Applies a layer the layer store lacks from its decompressed stream, keeping its files
/// and its index in `store`; checks the stream's digest against the layer's diff_id.
async fn apply_fresh(
    mut unpacker: Unpacker,
    mut reader: inflate::LayerReader,
    store: &Path,
    at: &LayerAt<'_>,
) -> Result<Unpacker, EnsureError> {
    let files = store.join("files");
    fs::create_dir_all(&files).map_err(io_at(&files))?;
    let (unpacker, result) = blocking(move || {
        let before = unpacker.read_so_far();
        unpacker.record_into(files);
        let applied = unpacker.apply_inner(&mut reader, None);
        let record = unpacker.take_record();
        let read = unpacker.read_so_far() - before;
        let result = applied.map(|_| (record, read, reader.digest().cloned()));
        (unpacker, result)
    })
    .await;
    let (record, read, found) = result.map_err(|e| at.error(e))?;
    if let Some(found) = found
        && found != at.layer.diff_id
    {
        return Err(at.mismatch(found));
    }
    let record = record.expect("recording was started above");
    let index = LayerIndex {
        entries: record.entries,
        read,
        stored: record.stored,
    };
    let path = store.to_path_buf();
    blocking(move || layers::write(&path, &index))
        .await
        .map_err(io_at(store))?;
    Ok(unpacker)
}

/// After the last layer: directories' modes and times, the mount points the image lacks
/// (their names returned), and the tree's sizes.
fn finish_tree(unpacker: Unpacker, rootfs: &Path) -> Result<(Vec<String>, TreeSizes), UnpackError> {
    unpacker.finish()?;
    let mut added = Vec::new();
    for (name, mode) in MOUNT_POINTS {
        let p = rootfs.join(name);
        if fs::symlink_metadata(&p).is_err() {
            use std::os::unix::fs::PermissionsExt as _;
            let write = |source| UnpackError::Write {
                path: format!("/{name}"),
                source,
            };
            fs::create_dir(&p).map_err(write)?;
            fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).map_err(write)?;
            added.push((*name).to_owned());
        }
    }
    Ok((added, disk::tree_sizes(rootfs)))
}

impl ImageStore {
    /// Applies `layers` in order into `work/rootfs` (made here), each held to the store's
    /// [`UnpackLimits`](crate::UnpackLimits). A layer the layer store has is linked from
    /// there; the others are decompressed and hashed on threads of their own, ahead of
    /// their turn, written into the tree, each file also linked into a new layer store in
    /// `work/layers/I`, and each stream checked against its diff_id. Adds the mount points
    /// the image lacks.
    pub(super) async fn apply_layers(
        &self,
        reference: &ImageRef,
        digest: &Digest,
        work: &Path,
        layers: Vec<Layer>,
        progress: &dyn ProgressSink,
    ) -> Result<Unpacked, EnsureError> {
        let rootfs = work.join("rootfs");
        fs::create_dir_all(&rootfs).map_err(io_at(&rootfs))?;
        let (sources, jobs) = self.plan_layers(&layers).await;
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut readers = inflate::start(jobs, workers).into_iter();
        let mut unpacker = Unpacker::with_limits(&rootfs, self.options.unpack);
        let mut fresh = Vec::new();
        let n = layers.len();
        for (i, (layer, source)) in layers.into_iter().zip(sources).enumerate() {
            progress.event(&Progress::Unpacking {
                index: i,
                layers: n,
            });
            let at = LayerAt {
                reference,
                index: i,
                layers: n,
                layer: &layer,
            };
            // An uncompressed layer's stream is its blob, whose digest was verified as it
            // came in: its diff_id must be that digest, known before anything is written.
            if layer.is_plain() && layer.digest != layer.diff_id {
                return Err(at.mismatch(layer.digest.clone()));
            }
            unpacker = match source {
                Source::Stored(index) => {
                    let files = layers::layer_dir(&self.root, &layer.diff_id).join("files");
                    apply_stored(unpacker, index, files, &at).await?
                }
                Source::Fresh => {
                    let reader = readers.next().expect("a reader for each fresh layer");
                    let store = work.join("layers").join(i.to_string());
                    let unpacker = apply_fresh(unpacker, reader, &store, &at).await?;
                    fresh.push((layer.diff_id.clone(), store));
                    unpacker
                }
            };
        }
        let (added, sizes) = blocking(move || finish_tree(unpacker, &rootfs))
            .await
            .map_err(|source| EnsureError::Unpack {
                reference: reference.to_string(),
                layer: digest.clone(),
                source,
            })?;
        Ok(Unpacked {
            added,
            fresh,
            sizes,
        })
    }

    /// [`plan`] for `layers`, off the async threads: it reads the layer store's indexes.
    async fn plan_layers(&self, layers: &[Layer]) -> (Vec<Source>, Vec<inflate::Job>) {
        let root = self.root.clone();
        let layers: Vec<(Digest, PathBuf, Compression, Digest)> = layers
            .iter()
            .map(|l| {
                let blob = blob_path(&root, &l.digest);
                (l.digest.clone(), blob, l.compression, l.diff_id.clone())
            })
            .collect();
        let cap = self.options.unpack.max_bytes.saturating_add(1);
        blocking(move || plan(&root, &layers, cap)).await
    }
}
