//! The image cache: blobs by digest, one unpacked root filesystem per manifest digest.
//!
//! ```text
//! DIR/lock                          shared by ensure, exclusive for prune
//! DIR/blobs/sha256/HEX              verified blobs (manifests, configs, layers), shared
//! DIR/images/sha256/HEX/image.json  what was unpacked, from which references, when used
//! DIR/images/sha256/HEX/rootfs/     the root filesystem, renamed into place whole
//! DIR/layers/sha256/HEX/            a layer unpacked once, its files linked by each image's
//!                                   tree (`layers.rs`)
//! DIR/tmp/                          downloads and unpacks under way
//! ```
//!
//! Here: the store itself (its folders, its lock, what a pull returns). Its operations are
//! in modules of their own, lowest first, each using only those before it: `error.rs` (what
//! they fail with), `records.rs` (each image's `image.json`: read, listed, updated),
//! `apply.rs` (an image's layers applied into a new tree), `install.rs` (a pulled image
//! unpacked and moved into place), `ensure.rs` (a pull: the cache, else the registry),
//! `list.rs` (listing and disk usage) and `prune.rs`.

mod apply;
mod ensure;
pub(crate) mod error;
mod install;
mod list;
mod prune;
mod records;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::manifest::ImageConfig;
use crate::reference::{Digest, ImageRef};
use crate::registry::RegistryOptions;
use crate::store::error::{StoreError, store_io};
use crate::unpack::UnpackLimits;
use crate::user::{UserError, UserIds};

pub use list::{DiskUsage, ImageInfo};
pub use prune::{PruneOptions, PruneReport};

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
    pub fn user(&self) -> Result<Option<UserIds>, UserError> {
        self.config
            .user
            .as_deref()
            .map(|spec| crate::user::resolve(&self.rootfs, spec))
            .transpose()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A name no other file under `tmp/` has: the process, a count, the time's nanoseconds.
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

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("blocking cache work does not panic")
}

/// A blob's path in the cache.
fn blob_path(root: &Path, d: &Digest) -> PathBuf {
    root.join("blobs").join(d.algorithm().name()).join(d.hex())
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
}
