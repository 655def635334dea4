//! Talking to a registry through `oci-client`: the manifest for a platform, and blobs
//! streamed to disk, verified as they arrive, resumed with HTTP ranges when cut.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt as _;
use oci_client::client::{BlobResponse, ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use sha2::Digest as _;

use crate::auth::Credentials;
use crate::error::{EnsureError, io_at};
use crate::manifest::{self, DOCUMENT_MAX, Descriptor, Manifest, Parsed};
use crate::platform::Platform;
use crate::progress::{Progress, ProgressSink};
use crate::reference::{Algorithm, Digest, ImageRef, to_hex};

/// How a pull reaches registries.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Registries (`host:port`, as in references) reached over plain HTTP although they are
    /// not on a loopback address. Loopback registries always are; every other is HTTPS.
    pub insecure_registries: Vec<String>,
    /// Attempts per blob that make no progress before the pull gives up. Each attempt
    /// that brings new bytes resets the count.
    pub attempts: u32,
    /// The first pause between attempts; it doubles up to 8 seconds.
    pub backoff: Duration,
}

impl Default for RegistryOptions {
    fn default() -> RegistryOptions {
        RegistryOptions {
            insecure_registries: Vec::new(),
            attempts: 5,
            backoff: Duration::from_millis(200),
        }
    }
}

pub(crate) struct Registry {
    client: oci_client::Client,
    auth: RegistryAuth,
    had_login: bool,
    reference: ImageRef,
    options: RegistryOptions,
}

enum Failure {
    Transient(String),
    Fatal(EnsureError),
}

/// A running hash of either algorithm.
pub(crate) enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    pub(crate) fn new(a: Algorithm) -> Hasher {
        match a {
            Algorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
    pub(crate) fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }
    pub(crate) fn finish(self) -> Digest {
        match self {
            Hasher::Sha256(h) => Digest::from_parts(Algorithm::Sha256, to_hex(&h.finalize())),
            Hasher::Sha512(h) => Digest::from_parts(Algorithm::Sha512, to_hex(&h.finalize())),
        }
    }
}

pub(crate) fn digest_of(algorithm: Algorithm, bytes: &[u8]) -> Digest {
    let mut h = Hasher::new(algorithm);
    h.update(bytes);
    h.finish()
}

impl Registry {
    pub(crate) fn connect(
        reference: &ImageRef,
        credentials: &Credentials,
        options: &RegistryOptions,
    ) -> Result<Registry, EnsureError> {
        // reqwest is built without a default TLS provider; rustls with ring is the
        // workspace's (no C build). Installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let oci = reference.to_oci();
        let plain = reference.is_loopback_registry()
            || options
                .insecure_registries
                .iter()
                .any(|r| r == reference.registry());
        let protocol = if plain {
            ClientProtocol::HttpsExcept(vec![oci.resolve_registry().to_owned()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("div/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        let client =
            oci_client::Client::try_from(config).map_err(|e| EnsureError::Unreachable {
                reference: reference.to_string(),
                registry: reference.registry().to_owned(),
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Registry {
            client,
            auth: credentials.registry_auth(reference.registry()),
            had_login: credentials.get(reference.registry()).is_some(),
            reference: reference.clone(),
            options: options.clone(),
        })
    }

    fn classify(&self, e: OciDistributionError) -> Failure {
        let reference = self.reference.to_string();
        let registry = self.reference.registry().to_owned();
        let hint = if self.had_login {
            "check the login stored for it (docker login / podman login)".to_owned()
        } else {
            format!("log in first (`docker login {registry}`), or check the image's name")
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
            } => Failure::Fatal(EnsureError::NotFound {
                reference,
                registry,
                message: format!("HTTP 404 {message}").trim().to_owned(),
            }),
            OciDistributionError::ServerError { code, message, .. }
                if code == 401 || code == 403 =>
            {
                Failure::Fatal(EnsureError::Unauthorized {
                    reference,
                    registry,
                    message: format!("HTTP {code} {message}").trim().to_owned(),
                    hint,
                })
            }
            OciDistributionError::UnauthorizedError { .. } => {
                Failure::Fatal(EnsureError::Unauthorized {
                    reference,
                    registry,
                    message: "HTTP 401".to_owned(),
                    hint,
                })
            }
            OciDistributionError::AuthenticationFailure(why) => {
                Failure::Fatal(EnsureError::Unauthorized {
                    reference,
                    registry,
                    message: why.trim().to_owned(),
                    hint,
                })
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                let message = envelope
                    .errors
                    .iter()
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ");
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NotFound
                    )
                }) {
                    Failure::Fatal(EnsureError::NotFound {
                        reference,
                        registry,
                        message,
                    })
                } else if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    Failure::Fatal(EnsureError::Unauthorized {
                        reference,
                        registry,
                        message,
                        hint,
                    })
                } else if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Toomanyrequests))
                {
                    Failure::Transient(message)
                } else {
                    Failure::Fatal(EnsureError::Registry {
                        reference,
                        registry,
                        message,
                    })
                }
            }
            other => Failure::Fatal(EnsureError::Registry {
                reference,
                registry,
                message: other.to_string(),
            }),
        }
    }

    fn fatal(&self, f: Failure) -> EnsureError {
        match f {
            Failure::Fatal(e) => e,
            Failure::Transient(message) => EnsureError::Unreachable {
                reference: self.reference.to_string(),
                registry: self.reference.registry().to_owned(),
                message,
            },
        }
    }

    fn bad(&self, why: impl Into<String>) -> EnsureError {
        EnsureError::BadImage {
            reference: self.reference.to_string(),
            why: why.into(),
        }
    }

    async fn pause(&self, attempt: u32) {
        let d = self
            .options
            .backoff
            .saturating_mul(1 << attempt.min(6))
            .min(Duration::from_secs(8));
        tokio::time::sleep(d).await;
    }

    /// Runs `op` with retries on transient failures.
    async fn with_retries<T, F, Fut>(&self, mut op: F) -> Result<T, EnsureError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let mut attempt = 0;
        loop {
            match op().await {
                Ok(t) => return Ok(t),
                Err(e) => match self.classify(e) {
                    Failure::Transient(m) if attempt + 1 < self.options.attempts => {
                        tracing::debug!(error = %m, attempt, "retrying a registry request");
                        self.pause(attempt).await;
                        attempt += 1;
                    }
                    f => return Err(self.fatal(f)),
                },
            }
        }
    }

    async fn manifest_bytes(&self, at: &ImageRef) -> Result<Vec<u8>, EnsureError> {
        let oci = at.to_oci();
        let (bytes, _) = self
            .with_retries(|| {
                self.client
                    .pull_manifest_raw(&oci, &self.auth, manifest::ACCEPTED)
            })
            .await?;
        if bytes.len() as u64 > DOCUMENT_MAX {
            return Err(self.bad(format!(
                "its manifest is {} bytes, more than the {DOCUMENT_MAX} accepted",
                bytes.len()
            )));
        }
        Ok(bytes.to_vec())
    }

    /// Resolves the reference to one manifest for `platform`: its digest, its bytes and
    /// its parsed form. Every document's digest is checked.
    pub(crate) async fn resolve(
        &self,
        platform: &Platform,
    ) -> Result<(Digest, Vec<u8>, Manifest), EnsureError> {
        let oci = self.reference.to_oci();
        self.with_retries(|| {
            self.client
                .auth(&oci, &self.auth, oci_client::RegistryOperation::Pull)
        })
        .await?;
        let bytes = self.manifest_bytes(&self.reference).await?;
        let algorithm = self
            .reference
            .digest()
            .map_or(Algorithm::Sha256, |d| d.algorithm());
        let digest = digest_of(algorithm, &bytes);
        if let Some(want) = self.reference.digest()
            && *want != digest
        {
            return Err(EnsureError::DigestMismatch {
                registry: self.reference.registry().to_owned(),
                expected: want.clone(),
                actual: digest,
            });
        }
        match manifest::parse_document(&bytes).map_err(|w| self.bad(w))? {
            Parsed::Manifest(m) => Ok((digest, bytes, m)),
            Parsed::Index(entries) => {
                let chosen = entries.iter().find(|e| {
                    e.platform.as_ref().is_some_and(|p| platform.matches(p))
                        && matches!(
                            e.media_type.as_str(),
                            manifest::OCI_MANIFEST | manifest::DOCKER_MANIFEST | ""
                        )
                });
                let Some(entry) = chosen else {
                    let available = entries
                        .iter()
                        .filter_map(|e| e.platform.as_ref())
                        .filter(|p| p.os != "unknown")
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(EnsureError::NoPlatform {
                        reference: self.reference.to_string(),
                        platform: platform.to_string(),
                        available: if available.is_empty() {
                            "no platform at all".to_owned()
                        } else {
                            available
                        },
                    });
                };
                let at = self.reference.with_digest(entry.digest.clone());
                let bytes = self.manifest_bytes(&at).await?;
                let digest = digest_of(entry.digest.algorithm(), &bytes);
                if digest != entry.digest {
                    return Err(EnsureError::DigestMismatch {
                        registry: self.reference.registry().to_owned(),
                        expected: entry.digest.clone(),
                        actual: digest,
                    });
                }
                if bytes.len() as u64 != entry.size {
                    return Err(EnsureError::SizeMismatch {
                        registry: self.reference.registry().to_owned(),
                        digest,
                        expected: entry.size,
                        what: if (bytes.len() as u64) > entry.size {
                            "larger"
                        } else {
                            "smaller"
                        },
                    });
                }
                match manifest::parse_document(&bytes).map_err(|w| self.bad(w))? {
                    Parsed::Manifest(m) => Ok((digest, bytes, m)),
                    Parsed::Index(_) => {
                        Err(self
                            .bad("its index points at another index; only one level is supported"))
                    }
                }
            }
        }
    }

    /// Downloads a blob to `dest` through `partial`, verifying size and digest as it streams;
    /// a cut stream resumes from where it stopped (HTTP Range) or, where the registry
    /// ignores ranges, starts over. Nothing reaches `dest` unverified.
    pub(crate) async fn fetch_blob(
        &self,
        desc: &Descriptor,
        partial: &Path,
        dest: &Path,
        index: usize,
        progress: &dyn ProgressSink,
    ) -> Result<(), EnsureError> {
        let registry = self.reference.registry().to_owned();
        let oci = self.reference.to_oci();
        let oci_desc = OciDescriptor {
            media_type: desc.media_type.clone(),
            digest: desc.digest.to_string(),
            size: i64::try_from(desc.size).unwrap_or(i64::MAX),
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        let io_partial = |e| io_at(partial.to_path_buf())(e);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(partial)
            .map_err(io_partial)?;
        let mut hasher = Hasher::new(desc.digest.algorithm());
        let mut offset: u64 = 0;
        let mut failures: u32 = 0;
        let mut last = String::new();
        let mut total_attempts = 0u32;
        loop {
            if offset < desc.size {
                if failures >= self.options.attempts {
                    let _ = std::fs::remove_file(partial);
                    return Err(EnsureError::Incomplete {
                        registry,
                        digest: desc.digest.clone(),
                        attempts: total_attempts,
                        last,
                    });
                }
                if failures > 0 {
                    progress.event(&Progress::Retrying {
                        index,
                        digest: desc.digest.clone(),
                        offset,
                        error: last.clone(),
                    });
                    self.pause(failures - 1).await;
                }
                total_attempts += 1;
                let before = offset;
                match self
                    .client
                    .pull_blob_stream_partial(&oci, &oci_desc, offset, None)
                    .await
                {
                    Err(e) => match self.classify(e) {
                        Failure::Transient(m) => {
                            last = m;
                            failures += 1;
                            continue;
                        }
                        Failure::Fatal(e) => {
                            let _ = std::fs::remove_file(partial);
                            return Err(e);
                        }
                    },
                    Ok(resp) => {
                        let mut stream = match resp {
                            BlobResponse::Partial(s) => s.stream,
                            BlobResponse::Full(s) => {
                                if offset > 0 {
                                    // The registry ignored the range: start over.
                                    file.set_len(0).map_err(io_partial)?;
                                    drop(file);
                                    file = std::fs::OpenOptions::new()
                                        .create(true)
                                        .truncate(true)
                                        .write(true)
                                        .open(partial)
                                        .map_err(io_partial)?;
                                    hasher = Hasher::new(desc.digest.algorithm());
                                    offset = 0;
                                }
                                s.stream
                            }
                        };
                        while let Some(chunk) = stream.next().await {
                            let chunk = match chunk {
                                Ok(c) => c,
                                Err(e) => {
                                    // The verifying stream fails at the end on a digest
                                    // mismatch; that is judged below, not retried.
                                    last = e.to_string();
                                    break;
                                }
                            };
                            if offset + chunk.len() as u64 > desc.size {
                                drop(file);
                                let _ = std::fs::remove_file(partial);
                                return Err(EnsureError::SizeMismatch {
                                    registry,
                                    digest: desc.digest.clone(),
                                    expected: desc.size,
                                    what: "larger",
                                });
                            }
                            hasher.update(&chunk);
                            file.write_all(&chunk).map_err(io_partial)?;
                            offset += chunk.len() as u64;
                            progress.event(&Progress::Bytes {
                                index,
                                digest: desc.digest.clone(),
                                done: offset,
                                total: desc.size,
                            });
                        }
                        if offset < desc.size {
                            if last.is_empty() {
                                last = format!(
                                    "the registry closed the blob at byte {offset} of {}",
                                    desc.size
                                );
                            }
                            if offset > before {
                                failures = 0;
                            }
                            failures += 1;
                            continue;
                        }
                    }
                }
            }
            // offset == size: judge what arrived.
            file.sync_all().map_err(io_partial)?;
            drop(file);
            let actual = hasher.finish();
            if actual != desc.digest {
                let _ = std::fs::remove_file(partial);
                return Err(EnsureError::DigestMismatch {
                    registry,
                    expected: desc.digest.clone(),
                    actual,
                });
            }
            std::fs::rename(partial, dest).map_err(io_at(dest.to_path_buf()))?;
            return Ok(());
        }
    }

    /// Pushes a blob and manifest: for tests and tools that build images.
    pub(crate) fn client(&self) -> &oci_client::Client {
        &self.client
    }
}

/// A blob's path in the cache.
pub(crate) fn blob_path(root: &Path, d: &Digest) -> PathBuf {
    root.join("blobs").join(d.algorithm().name()).join(d.hex())
}
