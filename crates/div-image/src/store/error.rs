//! The errors of the store's operations: [`EnsureError`] for a pull, [`StoreError`] for the
//! others. Each of the steps a pull takes has an error of its own (the registry's
//! [`RegistryError`], the unpacker's [`UnpackError`]); here they become the pull's.

use std::path::PathBuf;

use crate::reference::Digest;
use crate::registry::error::RegistryError;
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

impl From<RegistryError> for EnsureError {
    /// The variant of the same name, with the same fields (and so the same words).
    fn from(e: RegistryError) -> EnsureError {
        match e {
            RegistryError::Unreachable {
                reference,
                registry,
                message,
            } => EnsureError::Unreachable {
                reference,
                registry,
                message,
            },
            RegistryError::NotFound {
                reference,
                registry,
                message,
            } => EnsureError::NotFound {
                reference,
                registry,
                message,
            },
            RegistryError::Unauthorized {
                reference,
                registry,
                message,
                hint,
            } => EnsureError::Unauthorized {
                reference,
                registry,
                message,
                hint,
            },
            RegistryError::Other {
                reference,
                registry,
                message,
            } => EnsureError::Registry {
                reference,
                registry,
                message,
            },
            RegistryError::NoPlatform {
                reference,
                platform,
                available,
            } => EnsureError::NoPlatform {
                reference,
                platform,
                available,
            },
            RegistryError::DigestMismatch {
                registry,
                expected,
                actual,
            } => EnsureError::DigestMismatch {
                registry,
                expected,
                actual,
            },
            RegistryError::SizeMismatch {
                registry,
                digest,
                expected,
                what,
            } => EnsureError::SizeMismatch {
                registry,
                digest,
                expected,
                what,
            },
            RegistryError::Incomplete {
                registry,
                digest,
                attempts,
                last,
            } => EnsureError::Incomplete {
                registry,
                digest,
                attempts,
                last,
            },
            RegistryError::BadImage { reference, why } => EnsureError::BadImage { reference, why },
            RegistryError::Io { path, source } => EnsureError::Io { path, source },
        }
    }
}

pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> EnsureError {
    let path = path.into();
    move |source| EnsureError::Io { path, source }
}

pub(crate) fn store_io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.into();
    move |source| StoreError { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry's error reads the same once it is the pull's: the words are written twice
    /// (the registry's own error, and the public one), and this keeps them the same.
    #[test]
    fn a_registry_error_keeps_its_words_as_the_pull_s() {
        let digest = Digest::sha256_of(b"a");
        let other = Digest::sha256_of(b"b");
        let s = String::from;
        let errors = [
            RegistryError::Unreachable {
                reference: s("r"),
                registry: s("h"),
                message: s("m"),
            },
            RegistryError::NotFound {
                reference: s("r"),
                registry: s("h"),
                message: s("m"),
            },
            RegistryError::Unauthorized {
                reference: s("r"),
                registry: s("h"),
                message: s("m"),
                hint: s("log in"),
            },
            RegistryError::Other {
                reference: s("r"),
                registry: s("h"),
                message: s("m"),
            },
            RegistryError::NoPlatform {
                reference: s("r"),
                platform: s("linux/amd64"),
                available: s("linux/arm64"),
            },
            RegistryError::DigestMismatch {
                registry: s("h"),
                expected: digest.clone(),
                actual: other,
            },
            RegistryError::SizeMismatch {
                registry: s("h"),
                digest: digest.clone(),
                expected: 7,
                what: "larger",
            },
            RegistryError::Incomplete {
                registry: s("h"),
                digest,
                attempts: 5,
                last: s("cut"),
            },
            RegistryError::BadImage {
                reference: s("r"),
                why: s("w"),
            },
            RegistryError::Io {
                path: PathBuf::from("/p"),
                source: std::io::Error::other("full"),
            },
        ];
        for e in errors {
            let words = e.to_string();
            let source = std::error::Error::source(&e).map(ToString::to_string);
            let pull = EnsureError::from(e);
            assert_eq!(pull.to_string(), words);
            assert_eq!(
                std::error::Error::source(&pull).map(ToString::to_string),
                source
            );
        }
    }
}
