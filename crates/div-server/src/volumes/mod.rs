//! Volumes: content-addressed blobs (kept outside the volume's directory), resumable and
//! verified uploads, committed trees, listings and file reads.
//!
//! [`Volumes`] is what the operations need of the server: its [`Home`], its [`Store`] and the
//! stages being written. Its modules, lowest first; each uses only modules listed before it
//! (and this one, for [`Volumes`]):
//!
//! - `error`: what each operation refuses or fails with.
//! - `stages`: the server's staged trees, in memory.
//! - `paths`: names, paths, the commit lock, a commit's answer.
//! - `beneath`: writing and reading beneath a volume without following a link a run left.
//! - `blobs`: which blobs a volume holds and where, a resumable upload's end.
//! - `tree`: a tree committed at a path; `put`: a tree put into the volume's root, as `cp`.
//! - `stage`: staged commits, a snapshot written as its packs arrive; `pack`: a pack of
//!   small blobs, stored or written into its stage.
//! - `read`: listings, files, whether a tree is held; `snapshot`: a volume's folder kept as
//!   a committed tree (a model version made from what a run wrote).
//! - `retention`: code snapshots kept and removed; `leftovers`: what earlier servers left.

use std::fs;

use div_api::Volume;

use crate::home::Home;
use crate::rules;
use crate::store::Store;
use div_runtime::clock;
use div_runtime::disk;

mod beneath;
mod blobs;
mod error;
pub(crate) mod leftovers;
mod pack;
mod paths;
mod put;
mod read;
pub(crate) mod retention;
mod snapshot;
pub(crate) mod stage;
mod stages;
mod tree;

pub(crate) use blobs::{begin_upload, finish_upload, missing_blobs};
pub(crate) use error::{
    CommitError, CreateVolumeError, DeleteVolumeError, LookupError, NoVolume, PathRefused,
    ReadError, RetentionError, UploadError,
};
pub(crate) use pack::store_pack;
pub(crate) use paths::{commit_lock, valid_hash};
pub(crate) use read::{list_tree, open_file, tree_held};
pub(crate) use snapshot::snapshot;
pub(crate) use stage::{commit_stage, stage_tree};
pub(crate) use stages::Stages;
pub(crate) use tree::commit_tree;

/// What the volume operations need of the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Volumes<'s> {
    pub(crate) home: &'s Home,
    pub(crate) store: &'s Store,
    /// Trees being written as their blobs arrive.
    pub(crate) stages: &'s Stages,
}

pub(crate) fn require_volume(vols: &Volumes<'_>, name: &str) -> Result<Volume, LookupError> {
    vols.store
        .volume(name)?
        .ok_or_else(|| NoVolume(name.to_owned()).into())
}

fn with_size(vols: &Volumes<'_>, mut v: Volume) -> Volume {
    v.size_bytes = disk::tree_bytes(&vols.home.volume_dir(&v.name));
    v
}

/// A volume's name as a route gives it, or the rule. Volume names have been held to it since
/// the first server (a volume is made only by `POST /v1/volumes`, which always checked it), so
/// no stored volume is refused by this.
pub(crate) fn check_name(name: &str) -> Result<(), CreateVolumeError> {
    rules::check_volume_name(name).map_err(|e| CreateVolumeError::BadName(e.to_string()))
}

/// Makes the volume `name` (or finds it made): whether it was made now, and the volume.
pub(crate) fn create_volume(
    vols: &Volumes<'_>,
    name: &str,
) -> Result<(bool, Volume), CreateVolumeError> {
    check_name(name)?;
    let created = vols.store.create_volume(name, &clock::now_rfc3339())?;
    vols.home.make_volume_dir(name)?;
    let volume = vols
        .store
        .volume(name)?
        .ok_or_else(|| NoVolume(name.to_owned()))?;
    Ok((created, with_size(vols, volume)))
}

pub(crate) fn list_volumes(vols: &Volumes<'_>) -> Result<Vec<Volume>, crate::fault::StateError> {
    Ok(vols
        .store
        .volumes()?
        .into_iter()
        .map(|v| with_size(vols, v))
        .collect())
}

pub(crate) fn delete_volume(vols: &Volumes<'_>, name: &str) -> Result<(), DeleteVolumeError> {
    if name == crate::home::MODELS_VOLUME {
        let models: Vec<String> = vols.store.models()?.into_iter().map(|(m, _)| m).collect();
        if !models.is_empty() {
            return Err(DeleteVolumeError::KeepsModels {
                volume: name.to_owned(),
                models,
            });
        }
    }
    if !vols.store.delete_volume(name)? {
        return Err(NoVolume(name.to_owned()).into());
    }
    let _ = fs::remove_dir_all(vols.home.volume_dir(name));
    let _ = fs::remove_dir_all(vols.home.blob_dir(name));
    Ok(())
}
