//! `div models` and `div evals`: a model's versions pushed (a local folder or file sent as
//! `div run` ships code, an unchanged tree sending nothing; or a volume's folder a run wrote,
//! copied by the control plane), listed, shown and removed; evaluations listed, and the latest
//! judged against checks for a CI gate.

use std::path::PathBuf;

use div_api::{
    ControlPlane, Evaluation, EvaluationList, Model, ModelList, ModelVersion, PushModel,
};
use div_spec::{Check, ModelRef, VolumeName};

use crate::error::RunError;
use crate::event::EventSink;
use crate::storage::place::VolumePath;
use crate::upload::{MODEL_PUSH, upload};

/// The volume the control plane keeps models' versions in.
pub const MODELS_VOLUME: &str = "div-models";

/// What `div models push` was asked: a local folder or file, or a volume's (`--from`).
#[derive(Debug, Clone)]
pub enum PushFrom {
    /// A local folder (its files) or file, sent.
    Local(PathBuf),
    /// A volume's folder or file (`VOLUME/PATH`), copied by the control plane.
    Volume(VolumePath),
}

/// What a push did.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub version: ModelVersion,
    /// Whether it is a new version (`false`: the latest already was this tree).
    pub new: bool,
    /// Files left out of a local folder (links), for people.
    pub warnings: Vec<String>,
}

fn check_name(name: &str) -> Result<(), RunError> {
    name.parse::<VolumeName>()
        .map(drop)
        .map_err(|e| RunError::ModelName {
            name: name.to_owned(),
            message: e.to_string().replace("a volume name", "a model's name"),
        })
}

/// `div models push NAME PATH` / `--from VOLUME/PATH`: `name`'s next version, or its latest
/// when that already is the same tree.
pub async fn push_model(
    cp: &dyn ControlPlane,
    name: &str,
    from: &PushFrom,
    sink: &mut dyn EventSink,
) -> Result<Pushed, RunError> {
    check_name(name)?;
    let before = latest_version(cp, name).await?;
    let (push, warnings) = match from {
        PushFrom::Local(local) => {
            let (shipment, warnings) =
                crate::storage::put::local_tree(local).map_err(|e| match e {
                    RunError::NotAFileOrFolder { path, kind } => {
                        RunError::ModelNotAFileOrFolder { path, kind }
                    }
                    e => e,
                })?;
            if shipment.manifest.entries.is_empty() {
                return Err(RunError::EmptyModel(local.clone()));
            }
            // Content-addressed: the same tree goes to the same path, which an unchanged
            // tree finds held and sends nothing to.
            let digests = shipment.manifest.digests();
            let path = format!("code/{name}/{}", &digests.id[..8]);
            let to = (path.as_str(), "");
            let digest = Some(digests.tree.as_str());
            upload(cp, &shipment, MODELS_VOLUME, to, digest, &MODEL_PUSH, sink).await?;
            let push = PushModel {
                volume: MODELS_VOLUME.to_owned(),
                path,
                extra: Default::default(),
            };
            (push, warnings)
        }
        PushFrom::Volume(at) => (
            PushModel {
                volume: at.volume.clone(),
                path: at.path.clone(),
                extra: Default::default(),
            },
            Vec::new(),
        ),
    };
    let version = cp
        .push_model(name, &push)
        .await
        .map_err(|e| RunError::api("push the model's version", e))?;
    let new = before.is_none_or(|b| version.version > b);
    Ok(Pushed {
        version,
        new,
        warnings,
    })
}

/// The number of `name`'s latest version, if it has one.
async fn latest_version(cp: &dyn ControlPlane, name: &str) -> Result<Option<u32>, RunError> {
    match cp.get_model(name).await {
        Ok(model) => Ok(model.versions.last().map(|v| v.version)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(RunError::api("look at the model", e)),
    }
}

/// `div models ls`.
pub async fn models(cp: &dyn ControlPlane) -> Result<ModelList, RunError> {
    cp.list_models()
        .await
        .map_err(|e| RunError::api("list the models", e))
}

/// `div models show NAME`.
pub async fn model(cp: &dyn ControlPlane, name: &str) -> Result<Model, RunError> {
    check_name(name)?;
    cp.get_model(name)
        .await
        .map_err(|e| RunError::api("look at the model", e))
}

/// `div models rm NAME[:vN]`: the version named, or every version of a model named alone.
pub async fn remove_model(cp: &dyn ControlPlane, reference: &ModelRef) -> Result<(), RunError> {
    let version = match reference.pin() {
        div_spec::ModelPin::Latest => None,
        div_spec::ModelPin::Version(v) => Some(*v),
        div_spec::ModelPin::Digest(_) => {
            let model = model(cp, reference.name()).await?;
            let wanted = reference.to_string();
            let digest = wanted.split_once('@').map_or("", |(_, d)| d);
            let found = model
                .versions
                .iter()
                .find(|v| v.digest == digest)
                .ok_or_else(|| RunError::NoModelVersion(wanted.clone()))?;
            Some(found.version)
        }
    };
    cp.delete_model(reference.name(), version)
        .await
        .map_err(|e| RunError::api("remove the model", e))
}

/// `div evals [NAME[:vN]]`: evaluations, newest first.
pub async fn evaluations(
    cp: &dyn ControlPlane,
    model: Option<&ModelRef>,
) -> Result<EvaluationList, RunError> {
    let reference = model.map(ToString::to_string);
    cp.list_evaluations(reference.as_deref())
        .await
        .map_err(|e| RunError::api("list the evaluations", e))
}

/// The verdicts of `checks` on `evaluation`'s run's result, as `div result --check` judges
/// them: each one's line, and whether it passed.
pub async fn judge(
    cp: &dyn ControlPlane,
    evaluation: &Evaluation,
    checks: &[Check],
) -> Result<Vec<(String, bool)>, RunError> {
    let report = crate::result(cp, &evaluation.run, checks).await?;
    Ok(report
        .judged
        .iter()
        .map(|v| (v.line(), v.outcome == div_spec::Outcome::Passed))
        .collect())
}
