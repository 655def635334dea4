//! Pushing blobs and manifests: for tests and tools that build images.

use crate::auth::Credentials;
use crate::reference::{Digest, ImageRef};
use crate::registry::{Registry, RegistryOptions};

/// The error returned by [`Pusher`]'s methods.
#[derive(Debug, thiserror::Error)]
#[error("cannot push to `{reference}`: {message}")]
pub struct PushError {
    reference: String,
    message: String,
}

/// Pushes to one repository.
pub struct Pusher {
    registry: Registry,
    reference: ImageRef,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher")
            .field("reference", &self.reference)
            .finish()
    }
}

impl Pusher {
    /// Connects to the repository of `reference` (its tag or digest is not used).
    pub async fn connect(
        reference: &ImageRef,
        credentials: &Credentials,
        options: &RegistryOptions,
    ) -> Result<Pusher, PushError> {
        let registry =
            Registry::connect(reference, credentials, options).map_err(|e| PushError {
                reference: reference.to_string(),
                message: e.to_string(),
            })?;
        let auth = credentials.registry_auth(reference.registry());
        registry
            .client()
            .auth(
                &reference.to_oci(),
                &auth,
                oci_client::RegistryOperation::Push,
            )
            .await
            .map_err(|e| PushError {
                reference: reference.to_string(),
                message: e.to_string(),
            })?;
        Ok(Pusher {
            registry,
            reference: reference.clone(),
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> PushError {
        PushError {
            reference: self.reference.to_string(),
            message: e.to_string(),
        }
    }

    /// Uploads a blob; returns its digest.
    pub async fn blob(&self, bytes: Vec<u8>) -> Result<Digest, PushError> {
        let digest = Digest::sha256_of(&bytes);
        self.registry
            .client()
            .push_blob(&self.reference.to_oci(), bytes, &digest.to_string())
            .await
            .map_err(|e| self.err(e))?;
        Ok(digest)
    }

    /// Uploads a manifest (or index) of `media_type` under `tag`; returns its digest.
    pub async fn manifest(
        &self,
        tag: &str,
        bytes: Vec<u8>,
        media_type: &str,
    ) -> Result<Digest, PushError> {
        let digest = Digest::sha256_of(&bytes);
        let at = oci_client::Reference::with_tag(
            self.reference.registry().to_owned(),
            self.reference.repository().to_owned(),
            tag.to_owned(),
        );
        let ct = http::HeaderValue::from_str(media_type).map_err(|e| self.err(e))?;
        self.registry
            .client()
            .push_manifest_raw(&at, bytes, ct)
            .await
            .map_err(|e| self.err(e))?;
        Ok(digest)
    }
}
