//! What the model operations refuse or fail with, one enum per operation. `http::refusal`
//! alone decides each one's status.

use crate::fault::{StateError, state_errors};
use crate::volumes::{CommitError, RetentionError};

/// The error of pushing a version (`POST /v1/models/{name}/versions`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PushModelError {
    /// The model's name breaks the rule for names (div-spec's words).
    #[error("{0}")]
    BadName(String),
    /// Its tree could not be kept (a path not there, not a folder or file, empty…).
    #[error(transparent)]
    Tree(#[from] CommitError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(PushModelError);

/// A model, or one of its versions, that is not there: with the versions there are.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnknownModel {
    #[error("no model `{name}`{}", there_are(models))]
    Model { name: String, models: Vec<String> },
    #[error(
        "`{name}` has no version {version}; its versions are {}",
        versions_said(versions)
    )]
    Version {
        name: String,
        version: u32,
        versions: Vec<u32>,
    },
    #[error(
        "no version of `{name}` has the digest `sha256:{digest}`; its versions are {}",
        versions_said(versions)
    )]
    Digest {
        name: String,
        digest: String,
        versions: Vec<u32>,
    },
}

fn there_are(models: &[String]) -> String {
    if models.is_empty() {
        "; there are no models yet: push one with `div models push NAME PATH`".to_owned()
    } else {
        format!("; the models are {}", models.join(", "))
    }
}

fn versions_said(versions: &[u32]) -> String {
    let said: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
    said.join(", ")
}

/// The error of resolving a model reference (an eval run's, `div models show`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveModelError {
    /// Not a reference (div-spec's words).
    #[error("{0}")]
    NotAReference(String),
    #[error(transparent)]
    Unknown(#[from] UnknownModel),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(ResolveModelError);

/// The error of removing a model or a version (`div models rm`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoveModelError {
    #[error(transparent)]
    Resolve(#[from] ResolveModelError),
    /// An eval run of it is queued or running.
    #[error(
        "`{reference}` is being evaluated by {run}; remove it once that run has ended (`div stop {run}` ends it now)"
    )]
    InUse { reference: String, run: String },
    #[error(transparent)]
    Tree(#[from] RetentionError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(RemoveModelError);

impl From<UnknownModel> for RemoveModelError {
    fn from(e: UnknownModel) -> RemoveModelError {
        RemoveModelError::Resolve(e.into())
    }
}

/// The error of reading evaluations.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvaluationError {
    #[error("no evaluation `{0}`")]
    NoEvaluation(String),
    #[error(transparent)]
    Resolve(#[from] ResolveModelError),
    #[error(transparent)]
    State(#[from] StateError),
}
state_errors!(EvaluationError);
