//! The image cache: blobs by digest, one unpacked root filesystem per manifest digest.
//!
//! ```text
//! DIR/lock                          shared by ensure, exclusive for prune
//! DIR/blobs/sha256/HEX              verified blobs (manifests, configs, layers), shared
//! DIR/images/sha256/HEX/image.json  what was unpacked, from which references, when used
//! DIR/images/sha256/HEX/rootfs/     the root filesystem, renamed into place whole
//! DIR/tmp/                          downloads and unpacks under way
//! ```

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{StreamExt as _, TryStreamExt as _};

use crate::auth::Credentials;
use crate::error::{EnsureError, StoreError, io_at, store_io};
use crate::manifest::{self, DOCUMENT_MAX, Descriptor, ImageConfig};
use crate::platform::Platform;
use crate::progress::{Progress, ProgressSink};
use crate::reference::{Digest, ImageRef};
use crate::registry::{Registry, RegistryOptions, blob_path};
use crate::unpack::{self, UnpackError, UnpackLimits, Unpacker};
use crate::{inflate, layers};

/// Directories a sandbox mounts over; created empty in a root filesystem that lacks them.
const MOUNT_POINTS: &[(&str, u32)] = &[
    ("proc", 0o555),
    ("dev", 0o755),
    ("sys", 0o555),
    ("tmp", 0o1777),
];

/// Layers downloaded at once.
const PARALLEL_BLOBS: usize = 3;

/// When [`ImageStore::ensure`] asks the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Resolve a tag at the registry each time (a digest reference already cached needs no
    /// network).
    #[default]
    Always,
    /// Use a cached image for the reference if there is one; pull otherwise.
    Missing,
    /// Never use the network: a reference not cached is an error.
    Never,
}

/// How the store pulls.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Registries, retries.
    pub registry: RegistryOptions,
    /// When to ask the registry.
    pub pull_policy: PullPolicy,
    /// What unpacking an image may take (its size, its entries, the free space).
    pub unpack: UnpackLimits,
}

/// A cache of images in one directory.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
    options: StoreOptions,
}

/// An image ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The reference it was asked for.
    pub reference: ImageRef,
    /// The manifest's digest: the image's identity in the cache.
    pub digest: Digest,
    /// The unpacked root filesystem. Shared between runs: mount it read-only.
    pub rootfs: PathBuf,
    /// What the image's config says about running it.
    pub config: ImageConfig,
    /// Where it came from this time: pulled, checked at the registry, or the cache alone.
    pub source: ImageSource,
}

/// How [`ImageStore::ensure`] found an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// Pulled now: its reference resolved at the registry to a digest the cache lacked.
    Pulled,
    /// Its reference resolved at the registry now, to a digest already cached.
    Checked,
    /// Taken from the cache without asking the registry (`PullPolicy::Missing` or `Never`,
    /// or a digest reference). `resolved_at`: when its reference last resolved at the
    /// registry to this digest (`None` for a digest reference, or a record older than this
    /// field).
    Cached { resolved_at: Option<SystemTime> },
}

impl Image {
    /// The ids the image's `User` names, resolved against its own `/etc/passwd` and
    /// `/etc/group` (`None` when it names none, which means root). A name the image does
    /// not know is an error that says so.
    pub fn user(&self) -> Result<Option<crate::user::UserIds>, crate::user::UserError> {
        self.config
            .user
            .as_deref()
            .map(|spec| crate::user::resolve(&self.rootfs, spec))
            .transpose()
    }
}

/// One cached image, as [`ImageStore::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The manifest's digest.
    pub digest: Digest,
    /// Every reference it was pulled as (`docker.io/library/busybox:latest`). A tag is the
    /// reference of one image only: the one it last resolved to at the registry.
    pub references: Vec<String>,
    /// When each reference last resolved at the registry to this image (pulled, or checked
    /// with `PullPolicy::Always`); a reference of a record older than this is left out.
    pub resolved: Vec<(String, SystemTime)>,
    /// What this cache downloaded for it: the blobs its pull fetched that the cache did not
    /// already have (a layer another image brought counts there). `None`: pulled by a store
    /// older than this count.
    pub downloaded_bytes: Option<u64>,
    /// Its platform.
    pub platform: Platform,
    /// The root filesystem.
    pub rootfs: PathBuf,
    /// Its layers' compressed size.
    pub compressed_bytes: u64,
    /// The unpacked tree's size on disk.
    pub unpacked_bytes: u64,
    /// When an [`ImageStore::ensure`] last returned it.
    pub last_used: SystemTime,
}

/// What [`ImageStore::prune`] removes.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Images to keep whatever else is said (those in use by runs).
    pub keep: Vec<Digest>,
    /// Remove only images last used before this instant; `None` removes every image not
    /// kept.
    pub unused_since: Option<SystemTime>,
}

/// What [`ImageStore::prune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// The images removed.
    pub images: Vec<Digest>,
    /// How many blobs were removed (no remaining image needed them).
    pub blobs: u64,
    /// How many layers were removed from the layer store (no remaining image links them).
    pub layers: u64,
    /// Bytes freed, as measured before removal.
    pub bytes: u64,
}

/// How much disk the cache takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Compressed blobs.
    pub blobs: u64,
    /// Unpacked root filesystems.
    pub images: u64,
    /// Unfinished downloads and unpacks.
    pub tmp: u64,
}

impl DiskUsage {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.blobs + self.images + self.tmp
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Record {
    manifest: Digest,
    config_digest: Digest,
    references: Vec<String>,
    platform: Platform,
    config: ImageConfig,
    layers: Vec<Descriptor>,
    unpacked_bytes: u64,
    unpacked_at: u64,
    last_used: u64,
    /// Empty mount points the store added (`proc`, `dev`, `sys`, `tmp`).
    added: Vec<String>,
    /// Unix seconds at which each reference last resolved at the registry to this image.
    #[serde(default)]
    resolved: std::collections::BTreeMap<String, u64>,
    /// The bytes the pull that made it downloaded.
    #[serde(default)]
    downloaded_bytes: Option<u64>,
    /// Its layers' diff_ids, in order: the layer stores it links (empty in a record older
    /// than the layer store, whose tree links none).
    #[serde(default)]
    diff_ids: Vec<Digest>,
    /// What its tree alone takes on disk: its directories and links, and any file no layer
    /// store shares (`None` in a record older than the layer store: all of
    /// `unpacked_bytes`).
    #[serde(default)]
    own_bytes: Option<u64>,
}

impl Record {
    fn blobs(&self) -> impl Iterator<Item = &Digest> {
        [&self.manifest, &self.config_digest]
            .into_iter()
            .chain(self.layers.iter().map(|l| &l.digest))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unique() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, tmp_dir: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = tmp_dir.join(format!("write-{}", unique()));
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

fn dir_size(p: &Path) -> u64 {
    unpack::tree_size(p)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking cache work does not panic")
}

/// One layer to unpack: its blob, how it is compressed, and its diff_id from the config.
struct Layer {
    digest: Digest,
    compression: manifest::Compression,
    diff_id: Digest,
}

impl Layer {
    /// Whether its uncompressed stream is its blob (so its diff_id is its blob's digest).
    fn is_plain(&self) -> bool {
        self.compression == manifest::Compression::None
            && self.digest.algorithm() == self.diff_id.algorithm()
    }
}

/// An image whose blobs are all in `blobs/`, ready to unpack.
struct Pulled {
    digest: Digest,
    config_digest: Digest,
    config: ImageConfig,
    descriptors: Vec<Descriptor>,
    layers: Vec<Layer>,
    downloaded: u64,
}

/// What unpacking an image made: the mount points it added, the layers it unpacked anew
/// (each diff_id and its new store, in the work folder until it joins `layers/`), its
/// sizes.
struct Unpacked {
    added: Vec<String>,
    fresh: Vec<(Digest, PathBuf)>,
    sizes: unpack::TreeSizes,
}

/// Where a layer comes from.
enum Source {
    /// The layer store has it: linked from there.
    Stored(layers::LayerIndex),
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
    layers: &[(Digest, PathBuf, manifest::Compression, Digest)],
    cap: u64,
) -> (Vec<Source>, Vec<inflate::Job>) {
    let mut sources = Vec::with_capacity(layers.len());
    let mut jobs = Vec::new();
    for (digest, blob, compression, diff_id) in layers {
        if let Some(index) = layers::load(&layers::layer_dir(root, diff_id)) {
            sources.push(Source::Stored(index));
            continue;
        }
        let plain = *compression == manifest::Compression::None
            && digest.algorithm() == diff_id.algorithm();
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
    let index = layers::LayerIndex {
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
fn finish_tree(
    unpacker: Unpacker,
    rootfs: &Path,
) -> Result<(Vec<String>, unpack::TreeSizes), UnpackError> {
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
    Ok((added, unpack::tree_sizes(rootfs)))
}

/// A held lock on the store; released on drop.
struct Lock(#[allow(dead_code)] fs::File);

impl ImageStore {
    /// Opens (creating) the cache in `dir`.
    pub fn open(dir: impl Into<PathBuf>) -> Result<ImageStore, StoreError> {
        ImageStore::open_with(dir, StoreOptions::default())
    }

    /// Opens (creating) the cache in `dir`, pulling as `options` say.
    pub fn open_with(
        dir: impl Into<PathBuf>,
        options: StoreOptions,
    ) -> Result<ImageStore, StoreError> {
        let root: PathBuf = dir.into();
        for sub in [
            "blobs/sha256",
            "blobs/sha512",
            "images/sha256",
            "images/sha512",
            "layers/sha256",
            "layers/sha512",
            "tmp",
        ] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(store_io(&p))?;
        }
        Ok(ImageStore { root, options })
    }

    /// The cache's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The same cache, images unpacked within `limits` (a caller whose settings change
    /// while it runs sets them per pull).
    pub fn with_unpack_limits(&self, limits: UnpackLimits) -> ImageStore {
        let mut store = self.clone();
        store.options.unpack = limits;
        store
    }

    /// The same cache, asking the registry as `policy` says (a caller whose runs each say
    /// when to pull sets it per pull).
    pub fn with_pull_policy(&self, policy: PullPolicy) -> ImageStore {
        let mut store = self.clone();
        store.options.pull_policy = policy;
        store
    }

    fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    fn image_dir(&self, d: &Digest) -> PathBuf {
        self.root
            .join("images")
            .join(d.algorithm().name())
            .join(d.hex())
    }

    async fn lock(&self, exclusive: bool) -> io::Result<Lock> {
        let path = self.root.join("lock");
        blocking(move || {
            let f = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)?;
            if exclusive {
                f.lock()?
            } else {
                f.lock_shared()?
            }
            Ok(Lock(f))
        })
        .await
    }

    fn read_record(&self, dir: &Path) -> Option<Record> {
        let text = fs::read(dir.join("image.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn records(&self) -> io::Result<Vec<(PathBuf, Record)>> {
        let mut out = Vec::new();
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("images").join(algo);
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for e in rd {
                let p = e?.path();
                if let Some(r) = self.read_record(&p) {
                    out.push((p, r));
                }
            }
        }
        out.sort_by(|a, b| a.1.manifest.cmp(&b.1.manifest));
        Ok(out)
    }

    /// Updates a record's references and last use; returns the image. `source` says how it
    /// was found: where the registry was asked (`Pulled`, `Checked`), the reference is
    /// recorded as resolved now, and a tag is taken from every other image that had it (a
    /// tag that moved names the new image only).
    fn use_record(
        &self,
        dir: &Path,
        mut record: Record,
        reference: &ImageRef,
        source: ImageSource,
    ) -> Result<Image, EnsureError> {
        let name = reference.to_string();
        if !record.references.contains(&name) {
            record.references.push(name.clone());
        }
        record.last_used = unix_now();
        let source = match source {
            // A digest reference never moves: when it "resolved" says nothing.
            ImageSource::Cached { .. } => ImageSource::Cached {
                resolved_at: record
                    .resolved
                    .get(&name)
                    .filter(|_| reference.digest().is_none())
                    .map(|t| UNIX_EPOCH + Duration::from_secs(*t)),
            },
            asked => {
                record.resolved.insert(name.clone(), unix_now());
                if reference.digest().is_none() {
                    self.untag_others(&record.manifest, &name)?;
                }
                asked
            }
        };
        let json = serde_json::to_vec_pretty(&record).expect("a record serialises");
        write_atomic(&dir.join("image.json"), &self.tmp(), &json).map_err(io_at(dir))?;
        Ok(Image {
            reference: reference.clone(),
            digest: record.manifest,
            rootfs: dir.join("rootfs"),
            config: record.config,
            source,
        })
    }

    /// Takes the tag `name` from every image but `keep`: it resolved to `keep` at the
    /// registry, so it names that image alone from now on.
    fn untag_others(&self, keep: &Digest, name: &str) -> Result<(), EnsureError> {
        let records = self.records().map_err(io_at(self.root.join("images")))?;
        for (dir, mut other) in records {
            if &other.manifest == keep || !other.references.iter().any(|r| r == name) {
                continue;
            }
            other.references.retain(|r| r != name);
            other.resolved.remove(name);
            let json = serde_json::to_vec_pretty(&other).expect("a record serialises");
            write_atomic(&dir.join("image.json"), &self.tmp(), &json).map_err(io_at(&dir))?;
        }
        Ok(())
    }

    /// The cached image for `reference` on `platform`, if any.
    fn cached(
        &self,
        reference: &ImageRef,
        platform: &Platform,
    ) -> Result<Option<(PathBuf, Record)>, EnsureError> {
        if let Some(d) = reference.digest() {
            let dir = self.image_dir(d);
            // A manifest's digest: its platform is checked where it is used. An index's
            // digest is found below, among the references pulled.
            if let Some(r) = self.read_record(&dir) {
                return Ok(Some((dir, r)));
            }
        }
        let name = reference.to_string();
        let records = self.records().map_err(io_at(self.root.join("images")))?;
        Ok(records
            .into_iter()
            .filter(|(_, r)| r.references.contains(&name) && platform.matches(&r.platform))
            .max_by_key(|(_, r)| r.last_used))
    }

    /// Whether the cache has an image for `reference` on `platform`, as `PullPolicy::Never`
    /// would find it (reads the records; no network, no lock).
    pub fn has(&self, reference: &ImageRef, platform: &Platform) -> bool {
        self.cached(reference, platform).is_ok_and(|c| c.is_some())
    }

    /// Refuses a cached image built for another platform.
    fn check_platform(
        reference: &ImageRef,
        platform: &Platform,
        record: &Record,
    ) -> Result<(), EnsureError> {
        if record.platform.os.is_empty() || platform.matches(&record.platform) {
            Ok(())
        } else {
            Err(EnsureError::NoPlatform {
                reference: reference.to_string(),
                platform: platform.to_string(),
                available: record.platform.to_string(),
            })
        }
    }

    /// Makes sure `reference` is cached and unpacked for `platform`, pulling what is
    /// missing; returns the image. Blobs are verified as they stream in; a layer is never
    /// unpacked twice for the same manifest digest.
    pub async fn ensure(
        &self,
        reference: &ImageRef,
        platform: &Platform,
        credentials: &Credentials,
        progress: &dyn ProgressSink,
    ) -> Result<Image, EnsureError> {
        let _lock = self
            .lock(false)
            .await
            .map_err(io_at(self.root.join("lock")))?;
        let policy = self.options.pull_policy;
        if (policy != PullPolicy::Always || reference.digest().is_some())
            && let Some((dir, record)) = self.cached(reference, platform)?
        {
            Self::check_platform(reference, platform, &record)?;
            progress.event(&Progress::Cached {
                manifest: record.manifest.clone(),
            });
            return self.use_record(
                &dir,
                record,
                reference,
                ImageSource::Cached { resolved_at: None },
            );
        }
        if policy == PullPolicy::Never {
            return Err(EnsureError::NotCached {
                reference: reference.to_string(),
            });
        }
        let registry = Registry::connect(reference, credentials, &self.options.registry)?;
        let (digest, manifest_bytes, manifest) = registry.resolve(platform).await?;
        let dir = self.image_dir(&digest);
        if let Some(record) = self.read_record(&dir) {
            Self::check_platform(reference, platform, &record)?;
            progress.event(&Progress::Cached {
                manifest: record.manifest.clone(),
            });
            return self.use_record(&dir, record, reference, ImageSource::Checked);
        }
        progress.event(&Progress::Resolved {
            manifest: digest.clone(),
            layers: manifest.layers.len(),
            bytes: manifest.layers.iter().map(|l| l.size).sum(),
        });
        let mpath = blob_path(&self.root, &digest);
        let mut downloaded = 0u64;
        if !mpath.exists() {
            write_atomic(&mpath, &self.tmp(), &manifest_bytes).map_err(io_at(&mpath))?;
            downloaded += manifest_bytes.len() as u64;
        }

        // The config first (small, and it must be valid), then the layers, a few at once.
        let config_idx = manifest.layers.len();
        if manifest.config.size > DOCUMENT_MAX {
            return Err(EnsureError::BadImage {
                reference: reference.to_string(),
                why: format!(
                    "its config is {} bytes, more than the {DOCUMENT_MAX} accepted",
                    manifest.config.size
                ),
            });
        }
        downloaded += self
            .fetch(&registry, &manifest.config, config_idx, progress)
            .await?;
        let cpath = blob_path(&self.root, &manifest.config.digest);
        let config_bytes = fs::read(&cpath).map_err(io_at(&cpath))?;
        let (config, diff_ids) =
            manifest::parse_config(&config_bytes).map_err(|why| EnsureError::BadImage {
                reference: reference.to_string(),
                why: format!("its config is not valid JSON of an image config: {why}"),
            })?;
        if diff_ids.len() != manifest.layers.len() {
            return Err(EnsureError::BadImage {
                reference: reference.to_string(),
                why: format!(
                    "its config lists {} layers and its manifest {}",
                    diff_ids.len(),
                    manifest.layers.len()
                ),
            });
        }
        if !config.platform.os.is_empty() && !platform.matches(&config.platform) {
            return Err(EnsureError::NoPlatform {
                reference: reference.to_string(),
                platform: platform.to_string(),
                available: config.platform.to_string(),
            });
        }
        let mut compressions = Vec::new();
        for l in &manifest.layers {
            compressions.push(manifest::layer_compression(&l.media_type).map_err(|why| {
                EnsureError::BadImage {
                    reference: reference.to_string(),
                    why,
                }
            })?);
        }
        downloaded += futures_util::stream::iter(manifest.layers.iter().enumerate())
            .map(|(i, l)| self.fetch(&registry, l, i, progress))
            .buffer_unordered(PARALLEL_BLOBS)
            .try_collect::<Vec<u64>>()
            .await?
            .into_iter()
            .sum::<u64>();

        let layers: Vec<Layer> = manifest
            .layers
            .iter()
            .zip(compressions)
            .zip(diff_ids)
            .map(|((l, compression), diff_id)| Layer {
                digest: l.digest.clone(),
                compression,
                diff_id,
            })
            .collect();
        let pulled = Pulled {
            digest,
            config_digest: manifest.config.digest.clone(),
            config,
            descriptors: manifest.layers.clone(),
            layers,
            downloaded,
        };
        self.install(reference, pulled, progress).await
    }

    /// Unpacks a pulled image into a private directory, then moves it into place whole (its
    /// new layers into the layer store first). Whatever goes wrong, the directory goes:
    /// nothing half unpacked is left in the cache.
    async fn install(
        &self,
        reference: &ImageRef,
        pulled: Pulled,
        progress: &dyn ProgressSink,
    ) -> Result<Image, EnsureError> {
        let Pulled {
            digest,
            config_digest,
            config,
            descriptors,
            layers,
            downloaded,
        } = pulled;
        let dir = self.image_dir(&digest);
        let work = self
            .tmp()
            .join(format!("unpack-{}-{}", digest.hex(), unique()));
        let diff_ids: Vec<Digest> = layers.iter().map(|l| l.diff_id.clone()).collect();
        let unpacked = match self
            .unpack(reference, &digest, &work, layers, progress)
            .await
        {
            Ok(unpacked) => unpacked,
            Err(e) => {
                let _ = blocking({
                    let work = work.clone();
                    move || unpack::remove_tree(&work)
                })
                .await;
                return Err(e);
            }
        };
        let now = unix_now();
        let record = Record {
            manifest: digest.clone(),
            config_digest,
            references: vec![reference.to_string()],
            platform: config.platform.clone(),
            config: config.clone(),
            layers: descriptors,
            unpacked_bytes: unpacked.sizes.total,
            unpacked_at: now,
            last_used: now,
            added: unpacked.added,
            resolved: [(reference.to_string(), now)].into_iter().collect(),
            downloaded_bytes: Some(downloaded),
            diff_ids,
            own_bytes: Some(unpacked.sizes.own),
        };
        let json = serde_json::to_vec_pretty(&record).expect("a record serialises");
        if let Err(e) = fs::write(work.join("image.json"), json) {
            let _ = unpack::remove_tree(&work);
            return Err(io_at(&work)(e));
        }
        self.publish_layers(unpacked.fresh);
        match fs::rename(&work, &dir) {
            Ok(()) => {}
            Err(_) if self.read_record(&dir).is_some() => {
                // Another pull of the same image won the race; use its tree.
                let _ = unpack::remove_tree(&work);
                let record = self.read_record(&dir).expect("checked just above");
                return self.use_record(&dir, record, reference, ImageSource::Checked);
            }
            Err(e) => {
                let _ = unpack::remove_tree(&work);
                return Err(io_at(&dir)(e));
            }
        }
        if reference.digest().is_none() {
            self.untag_others(&digest, &reference.to_string())?;
        }
        let rootfs = dir.join("rootfs");
        progress.event(&Progress::Ready {
            manifest: digest.clone(),
            rootfs: rootfs.clone(),
        });
        Ok(Image {
            reference: reference.clone(),
            digest,
            rootfs,
            config,
            source: ImageSource::Pulled,
        })
    }

    /// Moves the layers an image unpacked anew into the layer store, where the next image
    /// of the same layer links them. One another pull put there meanwhile stays, and this
    /// copy goes (the image keeps its own files: correct, only not shared).
    fn publish_layers(&self, fresh: Vec<(Digest, PathBuf)>) {
        for (diff_id, store) in fresh {
            let dest = layers::layer_dir(&self.root, &diff_id);
            if let Err(e) = fs::rename(&store, &dest) {
                if layers::load(&dest).is_none() {
                    tracing::warn!(layer = %diff_id, error = %e, "a layer could not join the layer store; it is not shared");
                }
                let _ = unpack::remove_tree(&store);
            }
        }
    }

    /// Applies `layers` in order into `work/rootfs` (made here), each held to the store's
    /// [`UnpackLimits`]. A layer the layer store has is linked from there; the others are
    /// decompressed and hashed on threads of their own, ahead of their turn, written into
    /// the tree, each file also linked into a new layer store in `work/layers/I`, and each
    /// stream checked against its diff_id. Adds the mount points the image lacks.
    async fn unpack(
        &self,
        reference: &ImageRef,
        digest: &Digest,
        work: &Path,
        layers: Vec<Layer>,
        progress: &dyn ProgressSink,
    ) -> Result<Unpacked, EnsureError> {
        let rootfs = work.join("rootfs");
        fs::create_dir_all(&rootfs).map_err(io_at(&rootfs))?;
        let (sources, jobs) = blocking({
            let root = self.root.clone();
            let layers: Vec<(Digest, PathBuf, manifest::Compression, Digest)> = layers
                .iter()
                .map(|l| {
                    let blob = blob_path(&root, &l.digest);
                    (l.digest.clone(), blob, l.compression, l.diff_id.clone())
                })
                .collect();
            let cap = self.options.unpack.max_bytes.saturating_add(1);
            move || plan(&root, &layers, cap)
        })
        .await;
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
                    let (unpacker, result) = blocking(move || {
                        let result = unpacker.compose(&index, &files);
                        (unpacker, result)
                    })
                    .await;
                    result.map_err(|e| at.error(e))?;
                    unpacker
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

    async fn fetch(
        &self,
        registry: &Registry,
        desc: &Descriptor,
        index: usize,
        progress: &dyn ProgressSink,
    ) -> Result<u64, EnsureError> {
        let dest = blob_path(&self.root, &desc.digest);
        if fs::metadata(&dest).is_ok_and(|m| m.len() == desc.size) {
            progress.event(&Progress::LayerDone {
                index,
                digest: desc.digest.clone(),
                cached: true,
            });
            return Ok(0);
        }
        progress.event(&Progress::LayerStarted {
            index,
            digest: desc.digest.clone(),
            size: desc.size,
        });
        let partial = self
            .tmp()
            .join(format!("{}-{}.partial", desc.digest.hex(), unique()));
        registry
            .fetch_blob(desc, &partial, &dest, index, progress)
            .await?;
        progress.event(&Progress::LayerDone {
            index,
            digest: desc.digest.clone(),
            cached: false,
        });
        Ok(desc.size)
    }

    /// The cached images, by digest. Blocking file I/O: call it from `spawn_blocking` in
    /// async code.
    pub fn list(&self) -> Result<Vec<ImageInfo>, StoreError> {
        let records = self.records().map_err(store_io(self.root.join("images")))?;
        Ok(records
            .into_iter()
            .map(|(dir, r)| ImageInfo {
                digest: r.manifest.clone(),
                references: r.references.clone(),
                resolved: r
                    .resolved
                    .iter()
                    .map(|(name, t)| (name.clone(), UNIX_EPOCH + Duration::from_secs(*t)))
                    .collect(),
                downloaded_bytes: r.downloaded_bytes,
                platform: r.platform.clone(),
                rootfs: dir.join("rootfs"),
                compressed_bytes: r.layers.iter().map(|l| l.size).sum(),
                unpacked_bytes: r.unpacked_bytes,
                last_used: UNIX_EPOCH + Duration::from_secs(r.last_used),
            })
            .collect())
    }

    /// How much disk the cache takes (walks `blobs/` and `tmp/`; unpacked images are what
    /// their trees alone take plus the layer store, each shared file once). Blocking, like
    /// [`list`](ImageStore::list).
    pub fn disk_usage(&self) -> Result<DiskUsage, StoreError> {
        let records = self.records().map_err(store_io(self.root.join("images")))?;
        let blobs = dir_size(&self.root.join("blobs"));
        let tmp = dir_size(&self.tmp());
        let own: u64 = records
            .iter()
            .map(|(_, r)| r.own_bytes.unwrap_or(r.unpacked_bytes))
            .sum();
        let stored: u64 = self
            .stored_layers()
            .map_err(store_io(self.root.join("layers")))?
            .iter()
            .map(|(_, dir)| layers::disk_bytes(dir))
            .sum();
        Ok(DiskUsage {
            blobs,
            images: own + stored,
            tmp,
        })
    }

    /// Every layer in the layer store: its diff_id (`None` for a folder that names none)
    /// and its folder.
    fn stored_layers(&self) -> io::Result<Vec<(Option<Digest>, PathBuf)>> {
        let mut out = Vec::new();
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("layers").join(algo);
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for e in rd {
                let e = e?;
                let name = e.file_name().to_string_lossy().into_owned();
                out.push((format!("{algo}:{name}").parse().ok(), e.path()));
            }
        }
        Ok(out)
    }

    /// Removes images (all not kept, or those unused since an instant), then every blob no
    /// remaining image needs, and unfinished work in `tmp`. Waits for pulls under way.
    pub async fn prune(&self, options: &PruneOptions) -> Result<PruneReport, StoreError> {
        let _lock = self
            .lock(true)
            .await
            .map_err(store_io(self.root.join("lock")))?;
        let this = self.clone();
        let options = options.clone();
        blocking(move || this.prune_locked(&options)).await
    }

    fn prune_locked(&self, options: &PruneOptions) -> Result<PruneReport, StoreError> {
        let mut report = PruneReport::default();
        let keep: HashSet<&Digest> = options.keep.iter().collect();
        let mut needed: HashSet<Digest> = HashSet::new();
        let mut needed_layers: HashSet<Digest> = HashSet::new();
        for (dir, r) in self.records().map_err(store_io(self.root.join("images")))? {
            let old = options
                .unused_since
                .is_none_or(|t| UNIX_EPOCH + Duration::from_secs(r.last_used) < t);
            if keep.contains(&r.manifest) || !old {
                needed.extend(r.blobs().cloned());
                needed_layers.extend(r.diff_ids.iter().cloned());
                continue;
            }
            // Its own blocks: the files it shares with the layer store go with the store's
            // last link, below, if no remaining image needs the layer.
            report.bytes += r.own_bytes.unwrap_or(r.unpacked_bytes);
            unpack::remove_tree(&dir).map_err(store_io(&dir))?;
            report.images.push(r.manifest.clone());
        }
        let stored = self
            .stored_layers()
            .map_err(store_io(self.root.join("layers")))?;
        for (diff_id, dir) in stored {
            if diff_id.is_some_and(|d| needed_layers.contains(&d)) {
                continue;
            }
            report.bytes += layers::disk_bytes(&dir);
            unpack::remove_tree(&dir).map_err(store_io(&dir))?;
            report.layers += 1;
        }
        for algo in ["sha256", "sha512"] {
            let dir = self.root.join("blobs").join(algo);
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd {
                let e = e.map_err(store_io(&dir))?;
                let name = e.file_name().to_string_lossy().into_owned();
                let needed_here = format!("{algo}:{name}")
                    .parse::<Digest>()
                    .is_ok_and(|d| needed.contains(&d));
                if !needed_here {
                    report.bytes += e.metadata().map_or(0, |m| m.len());
                    fs::remove_file(e.path()).map_err(store_io(e.path()))?;
                    report.blobs += 1;
                }
            }
        }
        let tmp = self.tmp();
        if let Ok(rd) = fs::read_dir(&tmp) {
            for e in rd.flatten() {
                report.bytes += dir_size(&e.path());
                unpack::remove_tree(&e.path()).map_err(store_io(e.path()))?;
            }
        }
        Ok(report)
    }
}
