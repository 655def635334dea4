//! The volume routes (`/v1/volumes…`): each reads its request, calls one operation of
//! [`crate::volumes`] off the async threads, and answers. The blob upload is [`super::upload`]'s
//! and a file's read [`super::files`]'s.

use std::sync::Arc;

use div_api::routes::{self, Found};
use div_api::{VolumeEntryList, VolumeList};
use hyper::Request;
use hyper::body::Incoming;

use super::error::HttpError;
use super::wire::{self, Resp, answer, blocking, empty, param, read_body, request};
use crate::server::{Server, spawn_work};
use crate::volumes;

/// 201 for something made now, 200 for one found made.
pub(super) fn made_or_found(made: bool) -> u16 {
    if made { 201 } else { 200 }
}

/// The volume a `/v1/volumes/{name}…` route names, held to the rule for volume names (422
/// with the rule otherwise) before anything is looked up by it.
pub(super) fn named(found: &Found<'_>) -> Result<String, HttpError> {
    let name = found.param("name");
    volumes::check_name(name)?;
    Ok(name.to_owned())
}

pub(super) async fn list(server: &Arc<Server>) -> Result<Resp, HttpError> {
    let volumes = blocking(server, |s| volumes::list_volumes(&s.volumes())).await?;
    Ok(answer(&routes::LIST_VOLUMES, 200, &VolumeList { volumes }))
}

pub(super) async fn create(
    server: &Arc<Server>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let body = request(&routes::CREATE_VOLUME, req).await?;
    let (made, v) = blocking(server, move |s| {
        volumes::create_volume(&s.volumes(), &body.name)
    })
    .await?;
    Ok(answer(&routes::CREATE_VOLUME, made_or_found(made), &v))
}

pub(super) async fn delete(server: &Arc<Server>, found: &Found<'_>) -> Result<Resp, HttpError> {
    let name = named(found)?;
    blocking(server, move |s| volumes::delete_volume(&s.volumes(), &name)).await?;
    Ok(empty(204))
}

pub(super) async fn missing_blobs(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let body = request(&routes::MISSING_BLOBS, req).await?;
    let m = blocking(server, move |s| {
        volumes::missing_blobs(&s.volumes(), &name, &body.hashes)
    })
    .await?;
    Ok(answer(&routes::MISSING_BLOBS, 200, &m))
}

pub(super) async fn upload_pack(
    server: &Arc<Server>,
    found: &Found<'_>,
    q: &[(String, String)],
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let body = read_body(req).await?;
    let stage = param(q, "stage");
    let answer = blocking(server, move |s| {
        volumes::store_pack(&s.volumes(), &name, &body, stage.as_deref())
    })
    .await?;
    Ok(wire::json(200, &answer))
}

pub(super) async fn commit_tree(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let body = request(&routes::COMMIT_TREE, req).await?;
    let volume = name.clone();
    let (made, t) = blocking(server, move |s| {
        volumes::commit_tree(&s.volumes(), &name, &body)
    })
    .await?;
    // A new code snapshot: the volume's old ones are let go by the retention rule, after the
    // answer (removing a large tree takes a while).
    if made && t.path.starts_with(volumes::retention::SNAPSHOTS) {
        spawn_work(server, move |server| {
            if let Err(e) = volumes::retention::prune(&server.volumes(), &volume) {
                tracing::warn!(volume, "could not apply code snapshots' retention: {e:?}");
            }
        });
    }
    Ok(answer(&routes::COMMIT_TREE, made_or_found(made), &t))
}

pub(super) async fn stage_tree(
    server: &Arc<Server>,
    found: &Found<'_>,
    req: Request<Incoming>,
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let body = request(&routes::STAGE_TREE, req).await?;
    let staged = blocking(server, move |s| {
        volumes::stage_tree(&s.volumes(), &name, &body)
    })
    .await?;
    Ok(answer(&routes::STAGE_TREE, 201, &staged))
}

pub(super) async fn commit_stage(
    server: &Arc<Server>,
    found: &Found<'_>,
) -> Result<Resp, HttpError> {
    let (name, stage) = (named(found)?, found.param("stage").to_owned());
    let volume = name.clone();
    let (made, t, homes) = blocking(server, move |s| {
        volumes::commit_stage(&s.volumes(), &name, &stage)
    })
    .await?;
    // After the answer: the blobs written into the tree are recorded (where they live now),
    // then the retention rule is applied, as after any new snapshot.
    if made {
        let (path, digest) = (t.path.clone(), t.digest.clone().unwrap_or_default());
        spawn_work(server, move |server| {
            let vols = server.volumes();
            if let Err(e) = volumes::stage::record_homes(&vols, &volume, &path, &digest, &homes) {
                tracing::warn!(volume, "could not record a staged tree's blobs: {e:?}");
            }
            if path.starts_with(volumes::retention::SNAPSHOTS)
                && let Err(e) = volumes::retention::prune(&vols, &volume)
            {
                tracing::warn!(volume, "could not apply code snapshots' retention: {e:?}");
            }
        });
    }
    Ok(answer(&routes::COMMIT_STAGE, made_or_found(made), &t))
}

pub(super) async fn tree_held(
    server: &Arc<Server>,
    found: &Found<'_>,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let p = param(q, "path").unwrap_or_default();
    let d = param(q, "digest").unwrap_or_default();
    let t = blocking(server, move |s| {
        volumes::tree_held(&s.volumes(), &name, &p, &d)
    })
    .await?;
    Ok(wire::json(200, &t))
}

pub(super) async fn list_tree(
    server: &Arc<Server>,
    found: &Found<'_>,
    q: &[(String, String)],
) -> Result<Resp, HttpError> {
    let name = named(found)?;
    let p = param(q, "path").unwrap_or_default();
    let entries = blocking(server, move |s| volumes::list_tree(&s.volumes(), &name, &p)).await?;
    Ok(answer(
        &routes::LIST_TREE,
        200,
        &VolumeEntryList { entries },
    ))
}
