//! Models: named trees of files, each version immutable and pinned by its digest
//! (`div_spec::ModelDigest`), and evaluations, each an eval run of one version.
//!
//! A version's tree is a committed tree of the volume [`MODELS_VOLUME`], under
//! `code/<name>/`: sent there by `div models push` through the same content-addressed upload
//! as code (an unchanged tree sends nothing, and is the same version), or copied there from a
//! run's volume (`--from`). Every run sees it read-only at `/mnt/div-models/code/…` (each
//! volume's `code/` is bound read-only), and code snapshots' retention never removes it while
//! the model keeps it.
//!
//! Its modules: `error` (one enum per operation), `digest` (a tree's digest, read from its
//! files), `evaluations` (an evaluation as the API shows it, from its run), and this one.

use div_api::{ModelList, ModelSummary, ModelVersion, PushModel};
use div_spec::{ModelPin, ModelRef};

use crate::fault::StateError;
use crate::store::{Added, RunRecord, VersionRow};
use crate::volumes::{self, Volumes};
use div_runtime::clock;

mod digest;
mod error;
pub(crate) mod evaluations;

pub(crate) use error::{
    EvaluationError, PushModelError, RemoveModelError, ResolveModelError, UnknownModel,
};

pub(crate) use crate::home::MODELS_VOLUME;

/// Where `name`'s versions are, in [`MODELS_VOLUME`].
fn trees_of(name: &str) -> String {
    format!("code/{name}")
}

/// Where a run finds the tree at `path` of [`MODELS_VOLUME`]: under `/mnt` in the sandbox,
/// or the volume's own folder where runs run unsandboxed.
pub(crate) fn mount_of(vols: &Volumes<'_>, path: &str, sandboxed: bool) -> String {
    if sandboxed {
        format!("/mnt/{MODELS_VOLUME}/{path}")
    } else {
        vols.home
            .volume_dir(MODELS_VOLUME)
            .join(path)
            .display()
            .to_string()
    }
}

fn version_of(row: &VersionRow, mount: String) -> ModelVersion {
    ModelVersion {
        model: row.model.clone(),
        version: row.version,
        digest: row.digest.clone(),
        volume: row.volume.clone(),
        path: row.path.clone(),
        mount,
        files: row.files,
        bytes: row.bytes,
        created_at: row.created_at.clone(),
        created_by: row.created_by.clone(),
        from: row.source.clone(),
        extra: Default::default(),
    }
}

/// `POST /v1/models/{name}/versions`: the tree `body` names as `name`'s next version, unless
/// its latest already is that tree (`false`: the same version, answered as it is). A tree
/// committed under `code/<name>/` of [`MODELS_VOLUME`] is taken as it is; any other folder or
/// file of a volume is copied there first.
pub(crate) fn push(
    vols: &Volumes<'_>,
    sandboxed: bool,
    name: &str,
    body: &PushModel,
    by: Option<String>,
) -> Result<(bool, ModelVersion), PushModelError> {
    volumes::check_name(name).map_err(|e| PushModelError::BadName(e.to_string()))?;
    vols.store
        .create_volume(MODELS_VOLUME, &clock::now_rfc3339())?;
    vols.home.make_volume_dir(MODELS_VOLUME)?;
    let prefix = trees_of(name);
    let committed = body.volume == MODELS_VOLUME
        && body.path.starts_with(&format!("{prefix}/"))
        && vols.store.tree(MODELS_VOLUME, &body.path)?.is_some();
    let (path, source) = if committed {
        (body.path.clone(), None)
    } else {
        let (_, tree) = volumes::snapshot(vols, &body.volume, &body.path, MODELS_VOLUME, &prefix)?;
        (tree.path, Some(format!("{}/{}", body.volume, body.path)))
    };
    let tree = digest::of_tree(&vols.home.volume_dir(MODELS_VOLUME).join(&path))?;
    let row = VersionRow {
        model: name.to_owned(),
        version: 0,
        digest: tree.digest,
        volume: MODELS_VOLUME.to_owned(),
        path,
        files: tree.files,
        bytes: tree.bytes,
        created_at: clock::now_rfc3339(),
        created_by: by,
        source,
    };
    Ok(match vols.store.add_model_version(&row)? {
        Added::New(row) => (true, version_of(&row, mount_of(vols, &row.path, sandboxed))),
        Added::Same(row) => (
            false,
            version_of(&row, mount_of(vols, &row.path, sandboxed)),
        ),
    })
}

/// `GET /v1/models`: every model, with its latest version.
pub(crate) fn list(vols: &Volumes<'_>, sandboxed: bool) -> Result<ModelList, StateError> {
    let mut models = Vec::new();
    for (name, versions) in vols.store.models()? {
        let latest = vols
            .store
            .model_versions(&name)?
            .pop()
            .map(|row| version_of(&row, mount_of(vols, &row.path, sandboxed)));
        models.push(ModelSummary {
            name,
            versions,
            latest,
            extra: Default::default(),
        });
    }
    Ok(ModelList {
        models,
        extra: Default::default(),
    })
}

/// Every version of `name`, oldest first; a model with none is unknown.
pub(crate) fn versions(
    vols: &Volumes<'_>,
    name: &str,
    sandboxed: bool,
) -> Result<Vec<ModelVersion>, ResolveModelError> {
    let rows = known_versions(vols, name)?;
    Ok(rows
        .iter()
        .map(|row| version_of(row, mount_of(vols, &row.path, sandboxed)))
        .collect())
}

fn known_versions(vols: &Volumes<'_>, name: &str) -> Result<Vec<VersionRow>, ResolveModelError> {
    let rows = vols.store.model_versions(name)?;
    if rows.is_empty() {
        let models = vols.store.models()?.into_iter().map(|(n, _)| n).collect();
        return Err(UnknownModel::Model {
            name: name.to_owned(),
            models,
        }
        .into());
    }
    Ok(rows)
}

/// The version `reference` (`NAME`, `NAME:vN`, `NAME@sha256:…`) names now: `NAME` alone its
/// latest. Refused, with the versions there are, when there is none such.
pub(crate) fn resolve(
    vols: &Volumes<'_>,
    reference: &str,
) -> Result<VersionRow, ResolveModelError> {
    let reference: ModelRef = reference
        .parse()
        .map_err(|e: div_spec::ModelRefError| ResolveModelError::NotAReference(e.to_string()))?;
    let mut rows = known_versions(vols, reference.name())?;
    let numbers = |rows: &[VersionRow]| rows.iter().map(|r| r.version).collect::<Vec<_>>();
    match reference.pin() {
        ModelPin::Latest => Ok(rows.pop().expect("known_versions has one at least")),
        ModelPin::Version(v) => match rows.iter().position(|r| r.version == *v) {
            Some(i) => Ok(rows.swap_remove(i)),
            None => Err(UnknownModel::Version {
                name: reference.name().to_owned(),
                version: *v,
                versions: numbers(&rows),
            }
            .into()),
        },
        ModelPin::Digest(hex) => {
            let digest = format!("sha256:{hex}");
            match rows.iter().position(|r| r.digest == digest) {
                Some(i) => Ok(rows.swap_remove(i)),
                None => Err(UnknownModel::Digest {
                    name: reference.name().to_owned(),
                    digest: hex.clone(),
                    versions: numbers(&rows),
                }
                .into()),
            }
        }
    }
}

/// `div models rm NAME[:vN]`: the version named (every version, for `NAME` alone) removed
/// with its tree; refused while an eval run of it is queued or running.
pub(crate) fn remove(
    vols: &Volumes<'_>,
    name: &str,
    version: Option<u32>,
    going: &[RunRecord],
) -> Result<(), RemoveModelError> {
    let rows = known_versions(vols, name).map_err(RemoveModelError::Resolve)?;
    if let Some(v) = version
        && !rows.iter().any(|r| r.version == v)
    {
        return Err(UnknownModel::Version {
            name: name.to_owned(),
            version: v,
            versions: rows.iter().map(|r| r.version).collect(),
        }
        .into());
    }
    let reference = match version {
        Some(v) => format!("{name}:v{v}"),
        None => name.to_owned(),
    };
    for record in going {
        if let Some(m) = &record.run.model
            && m.name == name
            && version.is_none_or(|v| v == m.version)
        {
            return Err(RemoveModelError::InUse {
                reference,
                run: record.run.name.clone(),
            });
        }
    }
    for row in vols.store.remove_model_versions(name, version)? {
        // A tree another version of any model still names is kept.
        if !vols.store.model_tree_at(&row.volume, &row.path)? {
            volumes::retention::remove(vols, &row.volume, &row.path)?;
        }
    }
    Ok(())
}
