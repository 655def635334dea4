//! Talking to a registry through `oci-client`: the manifest for a platform (`resolve.rs`),
//! and blobs streamed to disk, verified as they arrive, resumed with HTTP ranges when cut
//! (`blob.rs`). Here: the connection and its retries; what the registry's answers mean is in
//! `error.rs`, below the rest.

mod blob;
pub(crate) mod error;
mod resolve;

use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;

use crate::auth::Credentials;
use crate::reference::ImageRef;
use crate::registry::error::{Failure, RegistryError, classify};

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

/// One repository of one registry, as a pull (or a push) talks to it.
pub(crate) struct Registry {
    client: oci_client::Client,
    auth: RegistryAuth,
    had_login: bool,
    reference: ImageRef,
    options: RegistryOptions,
}

impl Registry {
    pub(crate) fn connect(
        reference: &ImageRef,
        credentials: &Credentials,
        options: &RegistryOptions,
    ) -> Result<Registry, RegistryError> {
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
            oci_client::Client::try_from(config).map_err(|e| RegistryError::Unreachable {
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

    /// What a failed request means for this pull.
    fn classify(&self, e: OciDistributionError) -> Failure {
        classify(e, &self.reference, self.had_login)
    }

    fn bad(&self, why: impl Into<String>) -> RegistryError {
        RegistryError::BadImage {
            reference: self.reference.to_string(),
            why: why.into(),
        }
    }

    /// The pause before attempt `attempt + 1`: the backoff, doubled each time, at most 8
    /// seconds.
    async fn pause(&self, attempt: u32) {
        let d = self
            .options
            .backoff
            .saturating_mul(1 << attempt.min(6))
            .min(Duration::from_secs(8));
        tokio::time::sleep(d).await;
    }

    /// Runs `op` with retries on transient failures.
    async fn with_retries<T, F, Fut>(&self, mut op: F) -> Result<T, RegistryError>
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
                    f => return Err(f.into_error(&self.reference)),
                },
            }
        }
    }

    /// Pushes a blob and manifest: for tests and tools that build images.
    pub(crate) fn client(&self) -> &oci_client::Client {
        &self.client
    }
}
