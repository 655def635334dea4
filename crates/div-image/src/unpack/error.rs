//! The unpacker's error.

use std::io;

use crate::unpack::limits::Limit;

/// The error returned by [`Unpacker::apply`](crate::Unpacker::apply).
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The tar stream (or its compression) is broken.
    #[error("the layer is not a readable tar stream")]
    Tar(#[source] io::Error),
    /// An entry could not be written.
    #[error("cannot write `{path}` from the layer")]
    Write {
        /// The entry's path inside the image.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An entry is malformed (a hard link to nothing, too many symlinks…).
    #[error("the layer's entry `{path}` is invalid: {why}")]
    Invalid {
        /// The entry's path inside the image.
        path: String,
        /// What was wrong.
        why: String,
    },
    /// The layer would pass one of the [`UnpackLimits`](crate::UnpackLimits); what it
    /// would have passed was not written.
    #[error("the layer unpacks past {0}")]
    Limit(Limit),
}
