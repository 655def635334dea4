//! The image cache's routes (`/v1/images…`): its listing, its prune, a pull whose progress
//! is streamed ([`super::pull`]).

use std::sync::Arc;

use div_api::routes;
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::wire::{self, Resp, answer, blocking, read_json, request};
use crate::server::Server;

pub(super) async fn list(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let cache = blocking(server, |s| s.images.listing()).await?;
    Ok(answer(&routes::LIST_IMAGES, 200, &cache))
}

pub(super) async fn prune(server: &Arc<Server>, req: Request<Incoming>) -> Result<Resp, HttpError> {
    // No field yet; the body is read so that one that is not JSON is refused.
    let _prune = request(&routes::PRUNE_IMAGES, req).await?;
    let pruned = server.images.prune_unused(server.home.runs()).await?;
    Ok(answer(&routes::PRUNE_IMAGES, 200, &pruned))
}

pub(super) async fn pull(server: &Arc<Server>, req: Request<Incoming>) -> Result<Resp, HttpError> {
    // Read more leniently than the table's `PullImage`: a body without `image` pulls what a
    // run naming none would get, as it always has.
    #[derive(serde::Deserialize)]
    struct Pull {
        image: Option<String>,
        #[serde(default)]
        pull: Option<div_api::PullPolicy>,
    }
    let body: Pull = read_json(req).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let handle = tokio::runtime::Handle::current();
    let server = Arc::clone(server);
    // On a blocking thread, as for `POST /v1/runs` (the pull's future is not `Send`).
    tokio::task::spawn_blocking(move || {
        handle.block_on(super::pull::pull_stream(
            &server.images,
            body.image,
            body.pull,
            tx,
        ));
    });
    Ok(wire::stream("application/x-ndjson", rx))
}
