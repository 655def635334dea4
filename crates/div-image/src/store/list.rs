//! What the cache holds: its images ([`ImageStore::list`]) and the disk it takes
//! ([`ImageStore::disk_usage`]).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::disk;
use crate::layers;
use crate::platform::Platform;
use crate::reference::Digest;
use crate::store::ImageStore;
use crate::store::error::{StoreError, store_io};

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

impl ImageStore {
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
        let blobs = disk::tree_size(&self.root.join("blobs"));
        let tmp = disk::tree_size(&self.tmp());
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
}
