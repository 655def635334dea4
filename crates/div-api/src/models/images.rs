//! The image cache's models: a pull's progress, the cache's listing and what a prune removed.

use serde::{Deserialize, Serialize};

use super::Extra;

/// `POST /v1/images/pull`: the image to pull.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullImage {
    /// A reference, as docker writes one: `busybox`, `host:port/name:tag`, `name@sha256:…`.
    pub image: String,
}

/// One line of `POST /v1/images/pull`'s answer (`application/x-ndjson`), in order; the last
/// is `Ready`, `Host` or `Error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum PullEvent {
    /// The manifest is known: how many layers, their compressed bytes.
    Resolved { layers: u64, bytes: u64 },
    /// Bytes verified so far, all layers together.
    Progress { done: u64, total: u64 },
    /// Layer `layer` (from 1) of `layers` is being unpacked.
    Unpacking { layer: u64, layers: u64 },
    /// The image is cached and unpacked.
    Ready { image: String, digest: String },
    /// Nothing was pulled: the control plane's own system stands in for this (default) image.
    Host { image: String },
    /// The image cannot be used: the error `POST /v1/runs` would give.
    Error { error: PullError },
    /// A line of a newer control plane.
    #[serde(other)]
    Other,
}

/// Why an image cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullError {
    pub code: String,
    pub message: String,
    /// Anything else useful: `{"registry_unreachable": "docker.io", "host_stands_in": true}`
    /// where the registry could not be reached at all.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

/// `GET /v1/images`: the control plane's image cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageCache {
    /// Where the cache is, on the control plane's machine.
    pub path: String,
    /// Every image it holds.
    pub images: Vec<CachedImage>,
    /// The disk it takes.
    pub disk: ImageDisk,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One image of the cache: pulled, verified and unpacked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedImage {
    /// Its manifest's digest, `sha256:…`.
    pub digest: String,
    /// Every reference it was pulled as (`docker.io/library/busybox:latest`).
    pub references: Vec<String>,
    /// Its layers' size as downloaded (compressed).
    pub compressed_bytes: u64,
    /// Its unpacked tree's size.
    pub unpacked_bytes: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The disk an image cache takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageDisk {
    /// Downloaded blobs (layers, configs, manifests).
    pub blobs: u64,
    /// Unpacked trees.
    pub images: u64,
    /// Downloads and unpacks under way, or left by one that stopped.
    pub tmp: u64,
}

impl ImageDisk {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.blobs + self.images + self.tmp
    }
}

/// `POST /v1/images/prune`: remove every cached image no queued or running run uses, and
/// the blobs only they needed. It has no fields yet; a newer client's are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneImages {
    #[serde(flatten)]
    pub extra: Extra,
}

/// What a prune removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedImages {
    /// The digests of the images removed.
    pub images: Vec<String>,
    /// How many blobs were removed (no image left needed them).
    pub blobs: u64,
    /// The bytes freed.
    pub bytes: u64,
    /// How many images were kept because queued or running runs use them.
    pub kept: u64,
    #[serde(flatten)]
    pub extra: Extra,
}
