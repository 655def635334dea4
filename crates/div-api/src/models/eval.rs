//! Models, their versions, and evaluations: eval runs' verdicts, each pinned to the digest of
//! the model version it judged.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{CheckVerdict, CodeRef, Extra, RunStatus};

/// One version of a model: an immutable tree of files, numbered from 1 in the order pushed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelVersion {
    /// The model's name, like `mask-rcnn`.
    pub model: String,
    /// Its number: `3` for `mask-rcnn:v3`.
    pub version: u32,
    /// `sha256:` and 64 hex digits, over its files' paths, modes and contents
    /// (`docs/eval.md`, "The digest").
    pub digest: String,
    /// Where its tree is kept: a volume, and the tree's path in it.
    pub volume: String,
    pub path: String,
    /// Where a run finds it (read-only): `/mnt/<volume>/<path>`.
    pub mount: String,
    pub files: u64,
    pub bytes: u64,
    pub created_at: String,
    /// Who pushed it, when the control plane knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// Where its files came from, for a version made from a volume (`VOLUME/PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /v1/models/{name}/versions`: a new version from what the volume holds at `path`:
/// a tree committed there (what `div models push` sends), or any folder or file of a volume
/// (`--from`), copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushModel {
    pub volume: String,
    /// A path inside the volume; `""` for its root.
    pub path: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A model in the listing: its versions' count and its latest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub name: String,
    pub versions: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<ModelVersion>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    pub models: Vec<ModelSummary>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/models/{name}`: every version, oldest first, and the evaluations of each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub name: String,
    pub versions: Vec<ModelVersion>,
    /// Its evaluations, newest first.
    #[serde(default)]
    pub evaluations: Vec<Evaluation>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What an eval run says of the model version it judges, on the run's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunModel {
    pub name: String,
    pub version: u32,
    pub digest: String,
    /// Where the run reads it: `DIVERGENT_MODEL_PATH`.
    pub path: String,
    /// The evaluation this run makes: `DIVERGENT_EVALUATION`.
    pub evaluation: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An evaluation: one eval run of a model version, and what it found. Kept as long as the
/// control plane keeps runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Like `ev_01j…`.
    pub id: String,
    pub model: String,
    pub version: u32,
    pub digest: String,
    /// The run: its id and name, its status.
    pub run: String,
    pub run_name: String,
    pub status: RunStatus,
    /// The code snapshot it ran, absent with `--no-upload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeRef>,
    /// The image, and its digest when one was pulled.
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// The checks, in canonical form, and each verdict once judged.
    #[serde(default)]
    pub checks: Vec<String>,
    #[serde(default)]
    pub verdicts: Vec<CheckVerdict>,
    /// The result's `metrics`, as the run wrote them, once it ended with a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub spent_cents: i64,
    /// Who placed it, when the control plane knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_by: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/evaluations`, newest first (`?model=` and `?version=` narrow it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationList {
    pub evaluations: Vec<Evaluation>,
    #[serde(flatten)]
    pub extra: Extra,
}
