//! Models in the fake: a version is the files a volume holds under a path (a committed tree
//! or any folder), its digest computed as the server computes it (`div_spec::ModelDigest`); a
//! version the same as the latest is the latest; an eval run is placed with its model version
//! and makes an evaluation.

use div_api::{
    ApiError, ErrorKind, Evaluation, EvaluationList, Model, ModelList, ModelSummary, ModelVersion,
    PushModel, Route, Run, RunModel,
};
use div_spec::{DigestMode, ModelDigest, ModelPin, ModelRef, sha256_hex};
use serde_json::Value;

use super::state::{FAKE_TIME, FakeControlPlane, State, invalid, not_found};

/// The volume the fake (as the server) keeps models' versions in.
const MODELS_VOLUME: &str = "div-models";

pub(crate) async fn list_models(fake: &FakeControlPlane) -> Result<ModelList, ApiError> {
    fake.called(Route::ListModels);
    let state = fake.state();
    Ok(ModelList {
        models: state
            .models
            .iter()
            .map(|(name, versions)| ModelSummary {
                name: name.clone(),
                versions: versions.len() as u32,
                latest: versions.last().cloned(),
                extra: Default::default(),
            })
            .collect(),
        extra: Default::default(),
    })
}

pub(crate) async fn get_model(fake: &FakeControlPlane, name: &str) -> Result<Model, ApiError> {
    fake.called(Route::GetModel);
    let state = fake.state();
    let versions = state
        .models
        .get(name)
        .cloned()
        .ok_or_else(|| not_found("model", name))?;
    Ok(Model {
        name: name.to_owned(),
        versions,
        evaluations: evaluations_of(&state, Some(name), None),
        extra: Default::default(),
    })
}

pub(crate) async fn push_model(
    fake: &FakeControlPlane,
    name: &str,
    push: &PushModel,
) -> Result<ModelVersion, ApiError> {
    fake.called(Route::PushModel);
    name.parse::<div_spec::VolumeName>()
        .map_err(|e| invalid(e.to_string(), Value::Null))?;
    let mut state = fake.state();
    let volume = state
        .volumes
        .get(&push.volume)
        .ok_or_else(|| not_found("volume", &push.volume))?;
    let prefix = if push.path.is_empty() {
        String::new()
    } else {
        format!("{}/", push.path)
    };
    let mut digest = ModelDigest::new();
    let (mut files, mut bytes) = (0u64, 0u64);
    for (path, file) in &volume.files {
        let Some(rel) = path.strip_prefix(&prefix) else {
            continue;
        };
        match file.kind {
            div_api::EntryKind::File => {
                let mode = if file.executable {
                    DigestMode::Executable
                } else {
                    DigestMode::File
                };
                digest.add(rel.as_bytes(), mode, &sha256_hex(&file.data));
                files += 1;
                bytes += file.data.len() as u64;
            }
            div_api::EntryKind::Symlink => digest.add(
                rel.as_bytes(),
                DigestMode::Symlink,
                &sha256_hex(file.target.as_deref().unwrap_or_default().as_bytes()),
            ),
        }
    }
    if files == 0 {
        return Err(not_found(
            "file under",
            &format!("{}/{}", push.volume, push.path),
        ));
    }
    let digest = digest.finish();
    let versions = state.models.entry(name.to_owned()).or_default();
    if let Some(latest) = versions.last().filter(|l| l.digest == digest) {
        return Ok(latest.clone());
    }
    let version = ModelVersion {
        model: name.to_owned(),
        version: versions.len() as u32 + 1,
        digest,
        volume: MODELS_VOLUME.to_owned(),
        path: format!("code/{name}/{}", versions.len() + 1),
        mount: format!("/mnt/{MODELS_VOLUME}/code/{name}/{}", versions.len() + 1),
        files,
        bytes,
        created_at: FAKE_TIME.to_owned(),
        created_by: None,
        from: None,
        extra: Default::default(),
    };
    versions.push(version.clone());
    Ok(version)
}

pub(crate) async fn delete_model(
    fake: &FakeControlPlane,
    name: &str,
    version: Option<u32>,
) -> Result<(), ApiError> {
    fake.called(match version {
        Some(_) => Route::DeleteModelVersion,
        None => Route::DeleteModel,
    });
    let mut state = fake.state();
    let in_use = state.runs.iter().find(|r| {
        !r.status.is_terminal()
            && r.model
                .as_ref()
                .is_some_and(|m| m.name == name && version.is_none_or(|v| v == m.version))
    });
    if let Some(run) = in_use {
        return Err(ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("`{name}` is being evaluated by {}", run.name),
            Value::Null,
        ));
    }
    let versions = state
        .models
        .get_mut(name)
        .ok_or_else(|| not_found("model", name))?;
    match version {
        None => {
            state.models.remove(name);
        }
        Some(v) => {
            let before = versions.len();
            versions.retain(|m| m.version != v);
            if versions.len() == before {
                return Err(not_found("version of", name));
            }
        }
    }
    Ok(())
}

pub(crate) async fn list_evaluations(
    fake: &FakeControlPlane,
    model: Option<&str>,
) -> Result<EvaluationList, ApiError> {
    fake.called(Route::ListEvaluations);
    let state = fake.state();
    let (name, version) = match model {
        None => (None, None),
        Some(reference) => {
            let r: ModelRef = reference
                .parse()
                .map_err(|e: div_spec::ModelRefError| invalid(e.to_string(), Value::Null))?;
            let version = match r.pin() {
                ModelPin::Latest => None,
                _ => Some(resolve(&state, reference)?.version),
            };
            (Some(r.name().to_owned()), version)
        }
    };
    Ok(EvaluationList {
        evaluations: evaluations_of(&state, name.as_deref(), version),
        extra: Default::default(),
    })
}

pub(crate) async fn get_evaluation(
    fake: &FakeControlPlane,
    id: &str,
) -> Result<Evaluation, ApiError> {
    fake.called(Route::GetEvaluation);
    let state = fake.state();
    state
        .runs
        .iter()
        .find(|r| r.model.as_ref().is_some_and(|m| m.evaluation == id))
        .map(evaluation_of)
        .ok_or_else(|| not_found("evaluation", id))
}

/// The version `reference` names in `state`, or the refusal the server gives.
pub(crate) fn resolve(state: &State, reference: &str) -> Result<ModelVersion, ApiError> {
    let r: ModelRef = reference
        .parse()
        .map_err(|e: div_spec::ModelRefError| invalid(e.to_string(), Value::Null))?;
    let versions = state
        .models
        .get(r.name())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid(format!("no model `{}`", r.name()), Value::Null))?;
    let found = match r.pin() {
        ModelPin::Latest => versions.last(),
        ModelPin::Version(n) => versions.iter().find(|v| v.version == *n),
        ModelPin::Digest(hex) => versions
            .iter()
            .find(|v| v.digest == format!("sha256:{hex}")),
    };
    let there: Vec<String> = versions.iter().map(|v| format!("v{}", v.version)).collect();
    let there = there.join(", ");
    found.cloned().ok_or_else(|| {
        let why = match r.pin() {
            ModelPin::Digest(hex) => format!(
                "no version of `{}` has the digest `sha256:{hex}`; its versions are {there}",
                r.name()
            ),
            ModelPin::Version(n) => {
                format!(
                    "`{}` has no version {n}; its versions are {there}",
                    r.name()
                )
            }
            ModelPin::Latest => format!("`{}` has no version", r.name()),
        };
        invalid(why, Value::Null)
    })
}

/// What an eval run placed now with `version` says of it.
pub(crate) fn run_model(version: &ModelVersion, n: u64) -> RunModel {
    RunModel {
        name: version.model.clone(),
        version: version.version,
        digest: version.digest.clone(),
        path: version.mount.clone(),
        evaluation: format!("ev_fake{n:04}"),
        extra: Default::default(),
    }
}

fn evaluations_of(state: &State, name: Option<&str>, version: Option<u32>) -> Vec<Evaluation> {
    state
        .runs
        .iter()
        .rev()
        .filter(|r| {
            r.model.as_ref().is_some_and(|m| {
                name.is_none_or(|n| n == m.name) && version.is_none_or(|v| v == m.version)
            })
        })
        .map(evaluation_of)
        .collect()
}

fn evaluation_of(run: &Run) -> Evaluation {
    let model = run.model.clone().unwrap_or_else(|| RunModel {
        name: String::new(),
        version: 0,
        digest: String::new(),
        path: String::new(),
        evaluation: String::new(),
        extra: Default::default(),
    });
    Evaluation {
        id: model.evaluation,
        model: model.name,
        version: model.version,
        digest: model.digest,
        run: run.id.clone(),
        run_name: run.name.clone(),
        status: run.status,
        code: run.code.clone(),
        image: run.image.clone(),
        image_digest: None,
        checks: run.checks.clone(),
        verdicts: run.verdicts.clone(),
        metrics: None,
        exit_code: run.exit_code,
        spent_cents: run.spent_cents,
        placed_by: None,
        created_at: run.created_at.clone(),
        ended_at: run.ended_at.clone(),
        extra: Default::default(),
    }
}
