//! The errors of the store's operations.

use std::path::PathBuf;

use crate::reference::Digest;
use crate::unpack::{Limit, UnpackError};

/// The error returned by [`ImageStore::ensure`](crate::ImageStore::ensure).
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// The registry could not be reached at all.
    #[error("cannot reach the registry `{registry}` for `{reference}`: {message}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// The registry host.
        registry: String,
        /// What went wrong, in plain words.
        message: String,
    },
    /// The registry says the image (or one of its blobs) does not exist.
    #[error("the registry `{registry}` has no image `{reference}`: {message}")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry host.
        registry: String,
        /// The registry's answer.
        message: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error("the registry `{registry}` refused access to `{reference}` ({message}); {hint}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// The registry host.
        registry: String,
        /// The registry's answer.
        message: String,
        /// What would help.
        hint: String,
    },
    /// The registry answered something else that stops the pull.
    #[error("the registry `{registry}` failed the pull of `{reference}`: {message}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry host.
        registry: String,
        /// The registry's answer.
        message: String,
    },
    /// The index has no manifest for the platform asked for.
    #[error("`{reference}` has no image for `{platform}`; it has: {available}")]
    NoPlatform {
        /// The reference.
        reference: String,
        /// The platform asked for.
        platform: String,
        /// The platforms the index offers, comma-separated.
        available: String,
    },
    /// A blob's content does not match its digest: it was refused and not cached.
    #[error(
        "the blob `{expected}` from `{registry}` has digest `{actual}`: refused, nothing cached"
    )]
    DigestMismatch {
        /// The registry host.
        registry: String,
        /// The digest the manifest names.
        expected: Digest,
        /// The digest of what arrived.
        actual: Digest,
    },
    /// A blob is larger (or smaller) than its descriptor says: refused and not cached.
    #[error(
        "the blob `{digest}` from `{registry}` is {what} than the {expected} bytes its manifest says: refused, nothing cached"
    )]
    SizeMismatch {
        /// The registry host.
        registry: String,
        /// The digest.
        digest: Digest,
        /// The size the descriptor says.
        expected: u64,
        /// `larger` or `smaller`.
        what: &'static str,
    },
    /// A blob did not arrive whole after every retry.
    #[error(
        "the blob `{digest}` from `{registry}` did not arrive whole after {attempts} attempts: {last}"
    )]
    Incomplete {
        /// The registry host.
        registry: String,
        /// The digest.
        digest: Digest,
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// A manifest, index or config is not what the OCI spec says.
    #[error("`{reference}` is not a usable image: {why}")]
    BadImage {
        /// The reference.
        reference: String,
        /// What was wrong.
        why: String,
    },
    /// A layer could not be unpacked.
    #[error("cannot unpack layer `{layer}` of `{reference}`")]
    Unpack {
        /// The reference.
        reference: String,
        /// The layer's digest.
        layer: Digest,
        /// Why.
        #[source]
        source: UnpackError,
    },
    /// Unpacking a layer would pass one of the store's
    /// [`UnpackLimits`](crate::UnpackLimits): the pull is refused and nothing unpacked is
    /// kept.
    #[error(
        "layer {index} of {layers} (`{layer}`) of `{reference}` unpacks past {limit}: refused, nothing of the image kept"
    )]
    TooLarge {
        /// The reference.
        reference: String,
        /// The layer's place in the manifest, from 1.
        index: usize,
        /// How many layers the image has.
        layers: usize,
        /// The layer's digest (its blob's).
        layer: Digest,
        /// What it would have passed.
        limit: Limit,
    },
    /// A layer's uncompressed stream is not what the image's config says it is (its
    /// diff_id): the pull is refused and nothing unpacked is kept.
    #[error(
        "layer {index} of {layers} (`{layer}`) of `{reference}` unpacks to `{found}`, but the image's config says its diff_id is `{expected}`: refused, nothing of the image kept"
    )]
    DiffIdMismatch {
        /// The reference.
        reference: String,
        /// The layer's place in the manifest, from 1.
        index: usize,
        /// How many layers the image has.
        layers: usize,
        /// The layer's digest (its blob's).
        layer: Digest,
        /// The diff_id the config names.
        expected: Box<Digest>,
        /// The digest of the layer's uncompressed stream.
        found: Box<Digest>,
    },
    /// The pull policy forbids the network and the image is not cached.
    #[error("`{reference}` is not in the image cache, and the pull policy forbids pulling it")]
    NotCached {
        /// The reference.
        reference: String,
    },
    /// The cache directory could not be read or written.
    #[error("cannot use the image cache at `{path}`")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The error returned by the store's other operations ([`open`](crate::ImageStore::open),
/// [`list`](crate::ImageStore::list), [`prune`](crate::ImageStore::prune),
/// [`disk_usage`](crate::ImageStore::disk_usage)).
#[derive(Debug, thiserror::Error)]
#[error("cannot use the image cache at `{path}`")]
pub struct StoreError {
    pub(crate) path: PathBuf,
    #[source]
    pub(crate) source: std::io::Error,
}

pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> EnsureError {
    let path = path.into();
    move |source| EnsureError::Io { path, source }
}

pub(crate) fn store_io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.into();
    move |source| StoreError { path, source }
}
