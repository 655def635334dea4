//! A reference resolved to one manifest for a platform: through an index where the reference
//! names one, every document's digest checked.

use crate::hash::digest_of;
use crate::manifest::{self, DOCUMENT_MAX, Descriptor, Manifest, Parsed};
use crate::platform::Platform;
use crate::reference::{Algorithm, Digest, ImageRef};
use crate::registry::Registry;
use crate::registry::error::RegistryError;

impl Registry {
    /// Resolves the reference to one manifest for `platform`: its digest, its bytes and
    /// its parsed form. Every document's digest is checked.
    pub(crate) async fn resolve(
        &self,
        platform: &Platform,
    ) -> Result<(Digest, Vec<u8>, Manifest), RegistryError> {
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
            return Err(RegistryError::DigestMismatch {
                registry: self.reference.registry().to_owned(),
                expected: want.clone(),
                actual: digest,
            });
        }
        match self.parse(&bytes)? {
            Parsed::Manifest(m) => Ok((digest, bytes, m)),
            Parsed::Index(entries) => {
                let entry = self.choose(&entries, platform)?;
                self.index_entry(entry).await
            }
        }
    }

    /// The index entry for `platform` whose media type is a manifest's (or unsaid).
    fn choose<'e>(
        &self,
        entries: &'e [Descriptor],
        platform: &Platform,
    ) -> Result<&'e Descriptor, RegistryError> {
        let chosen = entries.iter().find(|e| {
            e.platform.as_ref().is_some_and(|p| platform.matches(p))
                && matches!(
                    e.media_type.as_str(),
                    manifest::OCI_MANIFEST | manifest::DOCKER_MANIFEST | ""
                )
        });
        chosen.ok_or_else(|| {
            let available = entries
                .iter()
                .filter_map(|e| e.platform.as_ref())
                .filter(|p| p.os != "unknown")
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            RegistryError::NoPlatform {
                reference: self.reference.to_string(),
                platform: platform.to_string(),
                available: if available.is_empty() {
                    "no platform at all".to_owned()
                } else {
                    available
                },
            }
        })
    }

    /// The manifest an index's `entry` points at, its digest and size checked against the
    /// entry's.
    async fn index_entry(
        &self,
        entry: &Descriptor,
    ) -> Result<(Digest, Vec<u8>, Manifest), RegistryError> {
        let at = self.reference.with_digest(entry.digest.clone());
        let bytes = self.manifest_bytes(&at).await?;
        let digest = digest_of(entry.digest.algorithm(), &bytes);
        if digest != entry.digest {
            return Err(RegistryError::DigestMismatch {
                registry: self.reference.registry().to_owned(),
                expected: entry.digest.clone(),
                actual: digest,
            });
        }
        if bytes.len() as u64 != entry.size {
            return Err(RegistryError::SizeMismatch {
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
        match self.parse(&bytes)? {
            Parsed::Manifest(m) => Ok((digest, bytes, m)),
            Parsed::Index(_) => {
                Err(self.bad("its index points at another index; only one level is supported"))
            }
        }
    }

    /// A manifest or index, read.
    fn parse(&self, bytes: &[u8]) -> Result<Parsed, RegistryError> {
        manifest::parse_document(bytes).map_err(|e| self.bad(e.to_string()))
    }

    /// The manifest (or index) at `at`, at most [`DOCUMENT_MAX`] bytes.
    async fn manifest_bytes(&self, at: &ImageRef) -> Result<Vec<u8>, RegistryError> {
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
}
