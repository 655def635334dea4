//! The image cache: listed, and pruned.

use div_api::{ControlPlane, ErrorKind, PruneImages};

use super::check::{CheckResult, api, ensure, expect_error};
use super::context::ConformanceContext;

/// The image cache, where there is one: a prune removes only images it listed, the listing
/// after it lacks them, and a second prune removes nothing. (A prune removes only images no
/// queued or running run uses, so suites sharing a control plane lose none they need.) A
/// control plane without an image cache answers both `NotFound`.
pub(crate) async fn images_listed_and_pruned(
    cp: &dyn ControlPlane,
    _ctx: &ConformanceContext,
) -> CheckResult {
    let prune = PruneImages::default();
    let before = match cp.list_images().await {
        Ok(cache) => cache,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            expect_error(
                "prune_images without an image cache",
                cp.prune_images(&prune).await,
                ErrorKind::NotFound,
                None,
            )?;
            return Ok(());
        }
        Err(e) => return Err(api("list_images")(e)),
    };
    let pruned = cp.prune_images(&prune).await.map_err(api("prune_images"))?;
    let listed = |digest: &String| before.images.iter().any(|i| &i.digest == digest);
    ensure!(
        pruned.images.iter().all(listed),
        "pruned images it did not list: {:?} of {:?}",
        pruned.images,
        before.images
    );
    let after = cp
        .list_images()
        .await
        .map_err(api("list_images after a prune"))?;
    ensure!(
        after
            .images
            .iter()
            .all(|i| !pruned.images.contains(&i.digest)),
        "images pruned are still listed: {:?}",
        after.images
    );
    ensure!(
        after.path == before.path,
        "the cache moved from `{}` to `{}`",
        before.path,
        after.path
    );
    let again = cp
        .prune_images(&prune)
        .await
        .map_err(api("prune_images again"))?;
    ensure!(
        again.images.is_empty(),
        "a second prune removed {:?}",
        again.images
    );
    Ok(())
}
