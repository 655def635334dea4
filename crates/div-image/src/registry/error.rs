//! What a registry's answers mean for a pull: the error of the registry's own operations
//! ([`RegistryError`]), and which failures are worth another attempt ([`classify`]).

use std::path::PathBuf;

use oci_client::errors::{OciDistributionError, OciErrorCode};

use crate::reference::{Digest, ImageRef};

/// The error of [`Registry`](super::Registry)'s operations: connecting, resolving a
/// reference, fetching a blob. A pull turns each into the
/// [`EnsureError`](crate::EnsureError) variant of the same name and the same words
/// (`Other` into `Registry`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    /// The registry could not be reached at all.
    #[error("cannot reach the registry `{registry}` for `{reference}`: {message}")]
    Unreachable {
        reference: String,
        registry: String,
        message: String,
    },
    /// The registry says the image (or one of its blobs) does not exist.
    #[error("the registry `{registry}` has no image `{reference}`: {message}")]
    NotFound {
        reference: String,
        registry: String,
        message: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error("the registry `{registry}` refused access to `{reference}` ({message}); {hint}")]
    Unauthorized {
        reference: String,
        registry: String,
        message: String,
        hint: String,
    },
    /// The registry answered something else that stops the pull.
    #[error("the registry `{registry}` failed the pull of `{reference}`: {message}")]
    Other {
        reference: String,
        registry: String,
        message: String,
    },
    /// The index has no manifest for the platform asked for.
    #[error("`{reference}` has no image for `{platform}`; it has: {available}")]
    NoPlatform {
        reference: String,
        platform: String,
        available: String,
    },
    /// A blob's content does not match its digest: it was refused and not cached.
    #[error(
        "the blob `{expected}` from `{registry}` has digest `{actual}`: refused, nothing cached"
    )]
    DigestMismatch {
        registry: String,
        expected: Digest,
        actual: Digest,
    },
    /// A blob is larger (or smaller) than its descriptor says: refused and not cached.
    #[error(
        "the blob `{digest}` from `{registry}` is {what} than the {expected} bytes its manifest says: refused, nothing cached"
    )]
    SizeMismatch {
        registry: String,
        digest: Digest,
        expected: u64,
        what: &'static str,
    },
    /// A blob did not arrive whole after every retry.
    #[error(
        "the blob `{digest}` from `{registry}` did not arrive whole after {attempts} attempts: {last}"
    )]
    Incomplete {
        registry: String,
        digest: Digest,
        attempts: u32,
        last: String,
    },
    /// A manifest or index is not what the OCI spec says.
    #[error("`{reference}` is not a usable image: {why}")]
    BadImage { reference: String, why: String },
    /// A download could not be written.
    #[error("cannot use the image cache at `{path}`")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A failed request: worth another attempt (the words of what failed), or not.
pub(crate) enum Failure {
    Transient(String),
    Fatal(RegistryError),
}

impl Failure {
    /// The error a pull gives up with: a transient failure after the last attempt is an
    /// unreachable registry.
    pub(crate) fn into_error(self, reference: &ImageRef) -> RegistryError {
        match self {
            Failure::Fatal(e) => e,
            Failure::Transient(message) => RegistryError::Unreachable {
                reference: reference.to_string(),
                registry: reference.registry().to_owned(),
                message,
            },
        }
    }
}

/// What `e`, from a request for `reference`, means: a transient failure (the network, a
/// server error, too many requests) or the end of the pull (not found, refused, anything
/// else). `had_login`: whether a login was sent, which changes the hint a refusal gives.
pub(crate) fn classify(e: OciDistributionError, reference: &ImageRef, had_login: bool) -> Failure {
    let registry = reference.registry().to_owned();
    let hint = if had_login {
        "check the login stored for it (docker login / podman login)".to_owned()
    } else {
        format!("log in first (`docker login {registry}`), or check the image's name")
    };
    let reference = reference.to_string();
    let unauthorized = |message: String| {
        Failure::Fatal(RegistryError::Unauthorized {
            reference: reference.clone(),
            registry: registry.clone(),
            message,
            hint: hint.clone(),
        })
    };
    match e {
        OciDistributionError::RequestError(r) => {
            let mut msg = r.to_string();
            let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&r);
            while let Some(s) = src {
                msg.push_str(": ");
                msg.push_str(&s.to_string());
                src = s.source();
            }
            Failure::Transient(msg)
        }
        OciDistributionError::IoError(io) => Failure::Transient(io.to_string()),
        OciDistributionError::ServerError { code, message, .. }
            if code >= 500 || code == 429 || code == 408 =>
        {
            Failure::Transient(format!("HTTP {code}: {message}"))
        }
        OciDistributionError::ServerError {
            code: 404, message, ..
        } => Failure::Fatal(RegistryError::NotFound {
            reference,
            registry,
            message: format!("HTTP 404 {message}").trim().to_owned(),
        }),
        OciDistributionError::ServerError { code, message, .. } if code == 401 || code == 403 => {
            unauthorized(format!("HTTP {code} {message}").trim().to_owned())
        }
        OciDistributionError::UnauthorizedError { .. } => unauthorized("HTTP 401".to_owned()),
        OciDistributionError::AuthenticationFailure(why) => unauthorized(why.trim().to_owned()),
        OciDistributionError::RegistryError { envelope, .. } => {
            let message = envelope
                .errors
                .iter()
                .map(|e| e.message.clone())
                .collect::<Vec<_>>()
                .join("; ");
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            match said(&codes) {
                Said::NotFound => Failure::Fatal(RegistryError::NotFound {
                    reference,
                    registry,
                    message,
                }),
                Said::Refused => unauthorized(message),
                Said::Busy => Failure::Transient(message),
                Said::Other => Failure::Fatal(RegistryError::Other {
                    reference,
                    registry,
                    message,
                }),
            }
        }
        other => Failure::Fatal(RegistryError::Other {
            reference,
            registry,
            message: other.to_string(),
        }),
    }
}

/// What the codes of a registry's error envelope say, the first that applies.
enum Said {
    /// The image, its repository or a blob is unknown.
    NotFound,
    /// Access is refused.
    Refused,
    /// Too many requests: worth another attempt.
    Busy,
    Other,
}

fn said(codes: &[&OciErrorCode]) -> Said {
    let any = |f: fn(&OciErrorCode) -> bool| codes.iter().any(|c| f(c));
    if any(|c| {
        matches!(
            c,
            OciErrorCode::ManifestUnknown
                | OciErrorCode::NameUnknown
                | OciErrorCode::BlobUnknown
                | OciErrorCode::NotFound
        )
    }) {
        Said::NotFound
    } else if any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied)) {
        Said::Refused
    } else if any(|c| matches!(c, OciErrorCode::Toomanyrequests)) {
        Said::Busy
    } else {
        Said::Other
    }
}
