//! What a pull reports as it goes, handed to a sink the caller gives.

use std::path::PathBuf;

use crate::reference::Digest;

/// One step of [`ImageStore::ensure`](crate::ImageStore::ensure).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// The image was already unpacked: nothing to pull.
    Cached {
        /// The manifest's digest.
        manifest: Digest,
    },
    /// The manifest for the platform is known.
    Resolved {
        /// The manifest's digest.
        manifest: Digest,
        /// How many layers the image has.
        layers: usize,
        /// Their compressed size, added up.
        bytes: u64,
    },
    /// A layer (or the config, index `layers`) starts downloading.
    LayerStarted {
        /// Its index in the manifest.
        index: usize,
        /// Its digest.
        digest: Digest,
        /// Its compressed size.
        size: u64,
    },
    /// Bytes of a blob arrived.
    Bytes {
        /// Its index in the manifest.
        index: usize,
        /// Its digest.
        digest: Digest,
        /// Bytes verified so far.
        done: u64,
        /// Its size.
        total: u64,
    },
    /// A blob was already in the cache (or just finished downloading and was verified).
    LayerDone {
        /// Its index.
        index: usize,
        /// Its digest.
        digest: Digest,
        /// Whether it came from the cache rather than the network.
        cached: bool,
    },
    /// A blob's transfer broke; the next attempt resumes at `offset`.
    Retrying {
        /// Its index.
        index: usize,
        /// Its digest.
        digest: Digest,
        /// Bytes kept.
        offset: u64,
        /// What broke.
        error: String,
    },
    /// Layer `index` of `layers` is being unpacked.
    Unpacking {
        /// Its index.
        index: usize,
        /// How many layers.
        layers: usize,
    },
    /// The root filesystem is in place.
    Ready {
        /// The manifest's digest.
        manifest: Digest,
        /// The root filesystem.
        rootfs: PathBuf,
    },
}

/// Receives [`Progress`] events; any `Fn(&Progress) + Send + Sync` is one.
pub trait ProgressSink: Send + Sync {
    /// Called for each event, in order, from the pulling task.
    fn event(&self, event: &Progress);
}

impl<F: Fn(&Progress) + Send + Sync> ProgressSink for F {
    fn event(&self, event: &Progress) {
        self(event)
    }
}

/// A sink that drops every event.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn event(&self, _: &Progress) {}
}
