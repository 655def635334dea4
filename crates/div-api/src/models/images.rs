//! The image cache's models: a pull's progress, the cache's listing and what a prune removed.

use serde::{Deserialize, Serialize};

use super::Extra;

/// `POST /v1/images/pull`: the image to pull.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullImage {
    /// A reference, as docker writes one: `busybox`, `host:port/name:tag`, `name@sha256:…`.
    pub image: String,
    /// When to ask the registry; absent: [`PullPolicy::Missing`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullPolicy>,
}

/// When the control plane asks the registry for a run's image (`div run --pull`, docker's
/// words).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PullPolicy {
    /// A reference already in the cache is used as it is, without the network (what its tag
    /// last resolved to); one that is not is pulled.
    #[default]
    Missing,
    /// A tag is resolved at the registry each time, and pulled when it moved (a digest
    /// reference already cached needs no network).
    Always,
    /// The network is never used: a reference not in the cache is refused.
    Never,
}

impl PullPolicy {
    /// Its name, as `--pull` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
            PullPolicy::Never => "never",
        }
    }
}

impl std::fmt::Display for PullPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PullPolicy {
    type Err = UnknownPullPolicy;

    fn from_str(typed: &str) -> Result<PullPolicy, UnknownPullPolicy> {
        match typed {
            "missing" => Ok(PullPolicy::Missing),
            "always" => Ok(PullPolicy::Always),
            "never" => Ok(PullPolicy::Never),
            _ => Err(UnknownPullPolicy(typed.to_owned())),
        }
    }
}

/// The error returned by [`PullPolicy`]'s `from_str`: a word that is not a pull policy (the
/// word as typed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{}` is not a pull policy; write `missing` (the default: pull only what is not cached), `always` (ask the registry each time) or `never` (use the cache alone)",
    .0.escape_debug()
)]
pub struct UnknownPullPolicy(pub String);

/// How the image a pull ended with was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSourceKind {
    /// Pulled now.
    Pulled,
    /// Its tag resolved at the registry now, to an image already cached.
    Checked,
    /// Taken from the cache without asking the registry.
    Cached,
    /// A source of a newer control plane.
    #[serde(other)]
    Other,
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
    /// The image is cached and unpacked. `source` (absent from an older control plane):
    /// pulled now, checked at the registry, or taken from the cache; `resolved_at` (RFC
    /// 3339): when its tag last resolved at the registry to this digest, where known.
    Ready {
        image: String,
        digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<ImageSourceKind>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolved_at: Option<String>,
    },
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
    /// Its layers' size as the registry serves them (compressed).
    pub compressed_bytes: u64,
    /// What this cache downloaded for it (blobs it did not already have; a layer shared
    /// with an image pulled before counts there). Absent: unknown (pulled by an older
    /// control plane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downloaded_bytes: Option<u64>,
    /// When each of its references last resolved at the registry to this image (pulled, or
    /// checked by `--pull always`).
    #[serde(default)]
    pub resolved: Vec<ResolvedReference>,
    /// Its unpacked tree's size.
    pub unpacked_bytes: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A reference and when it resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedReference {
    /// `127.0.0.1:5000/tools/busybox:1`.
    pub reference: String,
    /// RFC 3339, UTC.
    pub resolved_at: String,
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
