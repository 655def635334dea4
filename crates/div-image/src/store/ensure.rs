//! [`ImageStore::ensure`]: an image from the cache, or resolved at the registry and pulled
//! (the manifest, the config checked, the layers a few at once), then installed.

use std::fs;

use futures_util::{StreamExt as _, TryStreamExt as _};

use crate::auth::Credentials;
use crate::manifest::{self, DOCUMENT_MAX, ImageConfig, Manifest};
use crate::platform::Platform;
use crate::progress::{Progress, ProgressSink};
use crate::reference::{Digest, ImageRef};
use crate::registry::Registry;
use crate::store::apply::Layer;
use crate::store::error::{EnsureError, io_at};
use crate::store::install::Pulled;
use crate::store::records::Record;
use crate::store::{Image, ImageSource, ImageStore, PullPolicy, blob_path, unique, write_atomic};

/// Layers downloaded at once.
const PARALLEL_BLOBS: usize = 3;

impl ImageStore {
    /// Makes sure `reference` is cached and unpacked for `platform`, pulling what is
    /// missing; returns the image. Blobs are verified as they stream in; a layer is never
    /// unpacked twice for the same manifest digest.
    pub async fn ensure(
        &self,
        reference: &ImageRef,
        platform: &Platform,
        credentials: &Credentials,
        progress: &dyn ProgressSink,
    ) -> Result<Image, EnsureError> {
        let _lock = self
            .lock(false)
            .await
            .map_err(io_at(self.root.join("lock")))?;
        let policy = self.options.pull_policy;
        if (policy != PullPolicy::Always || reference.digest().is_some())
            && let Some((dir, record)) = self.cached(reference, platform)?
        {
            let source = ImageSource::Cached { resolved_at: None };
            return self.found(&dir, record, reference, platform, source, progress);
        }
        if policy == PullPolicy::Never {
            return Err(EnsureError::NotCached {
                reference: reference.to_string(),
            });
        }
        let registry = Registry::connect(reference, credentials, &self.options.registry)?;
        let (digest, manifest_bytes, manifest) = registry.resolve(platform).await?;
        let dir = self.image_dir(&digest);
        if let Some(record) = self.read_record(&dir) {
            return self.found(
                &dir,
                record,
                reference,
                platform,
                ImageSource::Checked,
                progress,
            );
        }
        progress.event(&Progress::Resolved {
            manifest: digest.clone(),
            layers: manifest.layers.len(),
            bytes: manifest.layers.iter().map(|l| l.size).sum(),
        });
        let mut downloaded = self.keep_manifest(&digest, &manifest_bytes)?;
        // The config first (small, and it must be valid), then the layers, a few at once.
        let (config, diff_ids, config_downloaded) = self
            .fetch_config(&registry, reference, platform, &manifest, progress)
            .await?;
        let layers = layers_of(reference, &manifest, diff_ids)?;
        downloaded += config_downloaded + self.fetch_layers(&registry, &manifest, progress).await?;
        let pulled = Pulled {
            digest,
            config_digest: manifest.config.digest.clone(),
            config,
            descriptors: manifest.layers,
            layers,
            downloaded,
        };
        self.install(reference, pulled, progress).await
    }

    /// An image the cache has: checked against `platform`, reported, its record updated
    /// (`source`: how it was found).
    fn found(
        &self,
        dir: &std::path::Path,
        record: Record,
        reference: &ImageRef,
        platform: &Platform,
        source: ImageSource,
        progress: &dyn ProgressSink,
    ) -> Result<Image, EnsureError> {
        check_platform(reference, platform, &record)?;
        progress.event(&Progress::Cached {
            manifest: record.manifest.clone(),
        });
        self.use_record(dir, record, reference, source)
    }

    /// Keeps the manifest's bytes in `blobs/` (already verified); returns the bytes written
    /// (none where the blob was there).
    fn keep_manifest(&self, digest: &Digest, bytes: &[u8]) -> Result<u64, EnsureError> {
        let path = blob_path(&self.root, digest);
        if path.exists() {
            return Ok(0);
        }
        write_atomic(&path, &self.tmp(), bytes).map_err(io_at(&path))?;
        Ok(bytes.len() as u64)
    }

    /// Fetches and reads the image's config: its run settings, its layers' diff_ids (as many
    /// as the manifest has layers), its platform (the one asked for). Returns them and the
    /// bytes downloaded.
    async fn fetch_config(
        &self,
        registry: &Registry,
        reference: &ImageRef,
        platform: &Platform,
        manifest: &Manifest,
        progress: &dyn ProgressSink,
    ) -> Result<(ImageConfig, Vec<Digest>, u64), EnsureError> {
        let bad = |why| EnsureError::BadImage {
            reference: reference.to_string(),
            why,
        };
        if manifest.config.size > DOCUMENT_MAX {
            return Err(bad(format!(
                "its config is {} bytes, more than the {DOCUMENT_MAX} accepted",
                manifest.config.size
            )));
        }
        // Its place in the progress reported: after the layers.
        let index = manifest.layers.len();
        let downloaded = self
            .fetch(registry, &manifest.config, index, progress)
            .await?;
        let path = blob_path(&self.root, &manifest.config.digest);
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        let (config, diff_ids) = manifest::parse_config(&bytes).map_err(|e| {
            bad(format!(
                "its config is not valid JSON of an image config: {e}"
            ))
        })?;
        if diff_ids.len() != manifest.layers.len() {
            return Err(bad(format!(
                "its config lists {} layers and its manifest {}",
                diff_ids.len(),
                manifest.layers.len()
            )));
        }
        if !config.platform.os.is_empty() && !platform.matches(&config.platform) {
            return Err(EnsureError::NoPlatform {
                reference: reference.to_string(),
                platform: platform.to_string(),
                available: config.platform.to_string(),
            });
        }
        Ok((config, diff_ids, downloaded))
    }

    /// Fetches every layer the cache lacks, [`PARALLEL_BLOBS`] at once; returns the bytes
    /// downloaded.
    async fn fetch_layers(
        &self,
        registry: &Registry,
        manifest: &Manifest,
        progress: &dyn ProgressSink,
    ) -> Result<u64, EnsureError> {
        Ok(
            futures_util::stream::iter(manifest.layers.iter().enumerate())
                .map(|(i, l)| self.fetch(registry, l, i, progress))
                .buffer_unordered(PARALLEL_BLOBS)
                .try_collect::<Vec<u64>>()
                .await?
                .into_iter()
                .sum::<u64>(),
        )
    }

    /// Fetches one blob into `blobs/` unless it is there; returns the bytes downloaded.
    async fn fetch(
        &self,
        registry: &Registry,
        desc: &manifest::Descriptor,
        index: usize,
        progress: &dyn ProgressSink,
    ) -> Result<u64, EnsureError> {
        let dest = blob_path(&self.root, &desc.digest);
        if fs::metadata(&dest).is_ok_and(|m| m.len() == desc.size) {
            progress.event(&Progress::LayerDone {
                index,
                digest: desc.digest.clone(),
                cached: true,
            });
            return Ok(0);
        }
        progress.event(&Progress::LayerStarted {
            index,
            digest: desc.digest.clone(),
            size: desc.size,
        });
        let partial = self
            .tmp()
            .join(format!("{}-{}.partial", desc.digest.hex(), unique()));
        registry
            .fetch_blob(desc, &partial, &dest, index, progress)
            .await?;
        progress.event(&Progress::LayerDone {
            index,
            digest: desc.digest.clone(),
            cached: false,
        });
        Ok(desc.size)
    }
}

/// Refuses a cached image built for another platform.
fn check_platform(
    reference: &ImageRef,
    platform: &Platform,
    record: &Record,
) -> Result<(), EnsureError> {
    if record.platform.os.is_empty() || platform.matches(&record.platform) {
        Ok(())
    } else {
        Err(EnsureError::NoPlatform {
            reference: reference.to_string(),
            platform: platform.to_string(),
            available: record.platform.to_string(),
        })
    }
}

/// The layers to unpack, in order: each one's blob, its compression (from its media type,
/// refused where it is not a tar layer) and its diff_id.
fn layers_of(
    reference: &ImageRef,
    manifest: &Manifest,
    diff_ids: Vec<Digest>,
) -> Result<Vec<Layer>, EnsureError> {
    manifest
        .layers
        .iter()
        .zip(diff_ids)
        .map(|(l, diff_id)| {
            let compression =
                manifest::layer_compression(&l.media_type).map_err(|e| EnsureError::BadImage {
                    reference: reference.to_string(),
                    why: e.to_string(),
                })?;
            Ok(Layer {
                digest: l.digest.clone(),
                compression,
                diff_id,
            })
        })
        .collect()
}
