//! The fake's image cache: images added by a test as if pulled, listed, pruned as the
//! server prunes its own.

use div_api::{ApiError, CachedImage, ImageCache, ImageDisk, PruneImages, PrunedImages, Route};

use super::state::{FAKE_IMAGES, FAKE_TIME, FakeControlPlane};

impl FakeControlPlane {
    /// The image cache holds `reference` (unpacked from `compressed_bytes` into
    /// `unpacked_bytes`), as if a pull had put it there (all of it downloaded, its tag
    /// resolved at the fake's time); its digest is made of its name. The fake pulls
    /// nothing: `pull_image` is the trait's default.
    pub fn add_image(&self, reference: &str, compressed_bytes: u64, unpacked_bytes: u64) {
        let digest = format!("sha256:{}", blake3::hash(reference.as_bytes()).to_hex());
        self.state().images.push(CachedImage {
            digest,
            references: vec![reference.to_owned()],
            resolved: vec![div_api::ResolvedReference {
                reference: reference.to_owned(),
                resolved_at: FAKE_TIME.to_owned(),
            }],
            downloaded_bytes: Some(compressed_bytes),
            compressed_bytes,
            unpacked_bytes,
            extra: Default::default(),
        });
    }
}

pub(crate) async fn list_images(fake: &FakeControlPlane) -> Result<ImageCache, ApiError> {
    fake.called(Route::ListImages);
    let images = fake.state().images.clone();
    let disk = ImageDisk {
        blobs: images.iter().map(|i| i.compressed_bytes).sum(),
        images: images.iter().map(|i| i.unpacked_bytes).sum(),
        tmp: 0,
    };
    Ok(ImageCache {
        path: FAKE_IMAGES.to_owned(),
        images,
        disk,
        extra: Default::default(),
    })
}

pub(crate) async fn prune_images(
    fake: &FakeControlPlane,
    _prune: &PruneImages,
) -> Result<PrunedImages, ApiError> {
    fake.called(Route::PruneImages);
    let mut state = fake.state();
    // As the server keeps them: the images of runs that have not ended.
    let in_use: Vec<String> = state
        .runs
        .iter()
        .filter(|r| !r.status.is_terminal())
        .map(|r| r.image.clone())
        .collect();
    let (kept, gone): (Vec<CachedImage>, Vec<CachedImage>) = std::mem::take(&mut state.images)
        .into_iter()
        .partition(|i| i.references.iter().any(|r| in_use.contains(r)));
    state.images = kept;
    Ok(PrunedImages {
        images: gone.iter().map(|i| i.digest.clone()).collect(),
        // The manifest, the config and one layer each.
        blobs: 3 * gone.len() as u64,
        bytes: gone.iter().map(|i| i.unpacked_bytes).sum(),
        kept: state.images.len() as u64,
        extra: Default::default(),
    })
}
