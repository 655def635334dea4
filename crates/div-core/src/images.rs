//! `div image ls` and `div image prune`: the control plane's image cache, through its API
//! (`GET /v1/images`, `POST /v1/images/prune`), as for every other command.

use div_api::{ApiError, ControlPlane, ImageCache, PruneImages, PrunedImages};

use crate::error::RunError;

/// The control plane's image cache: every image it pulled, and the disk they take. A
/// control plane without one (a hosted one, or one from before image caches) is
/// [`RunError::NoImageCache`].
pub async fn image_list(cp: &dyn ControlPlane) -> Result<ImageCache, RunError> {
    cp.list_images()
        .await
        .map_err(|e| failed(e, "list", "list the image cache"))
}

/// Removes every cached image no queued or running run uses, the blobs only they needed and
/// unfinished downloads; waits for pulls under way. [`RunError::NoImageCache`] as
/// [`image_list`].
pub async fn image_prune(cp: &dyn ControlPlane) -> Result<PrunedImages, RunError> {
    cp.prune_images(&PruneImages::default())
        .await
        .map_err(|e| failed(e, "prune", "prune the image cache"))
}

/// A 404 is a control plane without the routes, hence without an image cache.
fn failed(e: ApiError, what: &'static str, during: &'static str) -> RunError {
    if e.is_not_found() {
        RunError::NoImageCache { what }
    } else {
        RunError::api(during, e)
    }
}
