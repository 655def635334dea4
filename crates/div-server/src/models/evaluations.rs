//! Evaluations as the API shows them: the row that pins a run to a model version, and what
//! that run found (its status, verdicts, exit code, spend; its result's metrics; its image's
//! digest), read from the run's record and its directory.

use div_api::{Evaluation, EvaluationList, RunStatus};
use div_spec::ModelPin;

use super::error::{EvaluationError, ResolveModelError, UnknownModel};
use crate::store::EvaluationRow;
use crate::volumes::Volumes;

/// The most evaluations one listing answers.
const MAX_LISTED: u32 = 1000;

/// `GET /v1/evaluations`, newest first: of `model` (a name, or a reference `NAME:vN` or
/// `NAME@sha256:…` to one version) where given.
pub(crate) fn list(
    vols: &Volumes<'_>,
    model: Option<&str>,
    limit: Option<u32>,
) -> Result<EvaluationList, EvaluationError> {
    let limit = limit.unwrap_or(MAX_LISTED).clamp(1, MAX_LISTED);
    let (name, version) = match model {
        None => (None, None),
        Some(reference) => {
            let parsed: div_spec::ModelRef =
                reference.parse().map_err(|e: div_spec::ModelRefError| {
                    ResolveModelError::NotAReference(e.to_string())
                })?;
            let version = match parsed.pin() {
                ModelPin::Latest => {
                    // A model with no version is unknown; one with versions and no
                    // evaluation lists none.
                    if vols.store.model_versions(parsed.name())?.is_empty()
                        && vols
                            .store
                            .evaluations(Some(parsed.name()), None, 1)?
                            .is_empty()
                    {
                        let models = vols.store.models()?.into_iter().map(|(n, _)| n).collect();
                        return Err(ResolveModelError::from(UnknownModel::Model {
                            name: parsed.name().to_owned(),
                            models,
                        })
                        .into());
                    }
                    None
                }
                _ => Some(super::resolve(vols, reference)?.version),
            };
            (Some(parsed.name().to_owned()), version)
        }
    };
    let rows = vols.store.evaluations(name.as_deref(), version, limit)?;
    let mut evaluations = Vec::with_capacity(rows.len());
    for row in rows {
        evaluations.push(view(vols, &row)?);
    }
    Ok(EvaluationList {
        evaluations,
        extra: Default::default(),
    })
}

/// `GET /v1/evaluations/{id}`.
pub(crate) fn get(vols: &Volumes<'_>, id: &str) -> Result<Evaluation, EvaluationError> {
    let row = vols
        .store
        .evaluation(id)?
        .ok_or_else(|| EvaluationError::NoEvaluation(id.to_owned()))?;
    view(vols, &row)
}

/// A model: its versions, oldest first, and its evaluations, newest first
/// (`GET /v1/models/{name}`, and the dashboard's model page).
pub(crate) fn model(
    vols: &Volumes<'_>,
    name: &str,
    sandboxed: bool,
) -> Result<div_api::Model, EvaluationError> {
    let versions = super::versions(vols, name, sandboxed)?;
    let evaluations = of_model(vols, name)?;
    Ok(div_api::Model {
        name: name.to_owned(),
        versions,
        evaluations,
        extra: Default::default(),
    })
}

/// The evaluations of one model, newest first.
fn of_model(vols: &Volumes<'_>, name: &str) -> Result<Vec<Evaluation>, EvaluationError> {
    let rows = vols.store.evaluations(Some(name), None, MAX_LISTED)?;
    let mut evaluations = Vec::with_capacity(rows.len());
    for row in rows {
        evaluations.push(view(vols, &row)?);
    }
    Ok(evaluations)
}

/// What `row`'s run found, as the API shows an evaluation.
fn view(vols: &Volumes<'_>, row: &EvaluationRow) -> Result<Evaluation, EvaluationError> {
    let record = vols.store.get_run(&row.run_id)?;
    let dir = vols.home.run_dir(&row.run_id);
    let image_digest = std::fs::read(dir.join(crate::images::RUN_IMAGE_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("digest")?.as_str().map(str::to_owned));
    let metrics = std::fs::read(dir.join("result.kept.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<div_runtime::supervisor::KeptResult>(&b).ok())
        .and_then(|k| k.result)
        .and_then(|r| r.get("metrics").cloned());
    let mut evaluation = Evaluation {
        id: row.id.clone(),
        model: row.model.clone(),
        version: row.version,
        digest: row.digest.clone(),
        run: row.run_id.clone(),
        run_name: String::new(),
        status: RunStatus::Queued,
        code: None,
        image: String::new(),
        image_digest,
        checks: Vec::new(),
        verdicts: Vec::new(),
        metrics,
        exit_code: None,
        spent_cents: 0,
        placed_by: None,
        created_at: row.created_at.clone(),
        ended_at: None,
        extra: Default::default(),
    };
    if let Some(record) = record {
        let run = record.run;
        evaluation.run_name = run.name;
        evaluation.status = run.status;
        evaluation.code = run.code;
        evaluation.image = run.image;
        evaluation.checks = run.checks;
        evaluation.verdicts = run.verdicts;
        evaluation.exit_code = run.exit_code;
        evaluation.spent_cents = run.spent_cents;
        evaluation.ended_at = run.ended_at;
        evaluation.placed_by = run.placed_by;
    }
    Ok(evaluation)
}
