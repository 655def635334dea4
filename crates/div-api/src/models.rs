//! The API's JSON models.
//!
//! Every model keeps the fields it does not name in `extra`, so a client prints an object
//! exactly as the control plane sent it (`--json`) even when the server is newer than the
//! client. Money is integer cents; durations are whole seconds; timestamps are RFC 3339 UTC.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod eval;
mod images;
mod team;

pub use div_spec::{EntryKind, TreeEntry};
pub use eval::*;
pub use images::*;
pub use team::*;

/// Fields a model does not name, kept as they arrived.
pub type Extra = Map<String, Value>;

/// `GET /v1/health`: the control plane is up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    /// The server's version.
    pub version: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// What the control plane offers: SKUs, prices and limits, so a client can refuse and price
/// a run before anything is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalogue {
    /// Every SKU this control plane accepts.
    pub skus: Vec<SkuOffer>,
    /// Price of each core past what comes with the SKU, in cents an hour.
    pub extra_core_cents_per_hour: i64,
    /// Price of each GiB past what comes with the SKU, in cents an hour.
    pub extra_gib_cents_per_hour: i64,
    /// The most cores one container takes.
    pub max_cores: u32,
    /// The most memory one container takes, in GiB.
    pub max_memory_gib: u32,
    /// The longest a run is given, in seconds.
    pub max_run_seconds: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One SKU of the catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkuOffer {
    /// The name typed with `--gpu`: `b300`, `h200`, `h100`, `cpu`.
    pub name: String,
    /// Price per unit (per GPU; per container for `cpu`), in cents an hour.
    pub cents_per_hour: i64,
    /// Cores that come with each unit.
    pub cores_per_unit: u32,
    /// Memory that comes with each unit, in GiB.
    pub memory_gib_per_unit: u32,
    /// How many units this control plane has in all, when it knows (the local one does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Whether the GPUs are emulated (the local control plane's test inventory).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub emulated: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A volume: named storage that outlives runs, mounted at `/mnt/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub created_at: String,
    /// Bytes stored in committed files.
    #[serde(default)]
    pub size_bytes: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeList {
    pub volumes: Vec<Volume>,
}

/// `POST /v1/volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateVolume {
    pub name: String,
}

/// `POST /v1/volumes/{name}/blobs/missing`: which of these content hashes the volume lacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingBlobsRequest {
    /// blake3 hashes, lowercase hex.
    pub hashes: Vec<String>,
}

/// The answer to [`MissingBlobsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingBlobs {
    /// The hashes the volume lacks, in the order asked.
    pub missing: Vec<String>,
    /// For each missing hash with a partial upload, how many bytes already arrived, so a
    /// resumed upload sends only the rest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partial: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /v1/volumes/{name}/trees`: commit a manifest whose blobs were sent as a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitTree {
    /// Where in the volume the tree goes, like `code/9f31c2ab`. It must not exist yet,
    /// unless it holds exactly this tree (a retried commit succeeds).
    pub path: String,
    pub entries: Vec<TreeEntry>,
}

/// The answer to [`CommitTree`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedTree {
    pub volume: String,
    pub path: String,
    pub files: u64,
    pub bytes: u64,
    /// The tree's [`tree_digest`], where the server says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The answer to `POST /v1/volumes/{name}/stages` (a [`CommitTree`] as its body): a tree the
/// server writes as its blobs arrive, each new file once, in its place, and commits when asked
/// (`POST /v1/volumes/{name}/stages/{id}/commit`). Blobs for it go in packs sent with
/// `?stage={id}`; larger ones, and those of [`StagedTree::partial`], one by one as always,
/// linked in at the commit as are the blobs the volume held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedTree {
    /// What names the stage in the requests that follow.
    pub id: String,
    /// The tree's blobs the volume lacks, each once, in the tree's order.
    pub missing: Vec<String>,
    /// As [`MissingBlobs::partial`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partial: BTreeMap<String, u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tree's digest: blake3 of its entries, sorted by path (bytewise), as JSON. Two trees
/// with the same digest are the same tree; `GET /v1/volumes/{name}/trees?path=&digest=`
/// asks the server whether it holds this one at a path, so that an unchanged project's
/// next run sends neither its hashes nor its tree.
pub fn tree_digest(entries: &[TreeEntry]) -> String {
    let mut sorted: Vec<&TreeEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    // A Vec of plain structs serialises without fail.
    let json = serde_json::to_vec(&sorted).unwrap_or_default();
    blake3::hash(&json).to_hex().to_string()
}

/// One entry of a volume's listing (`GET /v1/volumes/{name}/tree?path=`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntry {
    pub path: String,
    /// `file`, `symlink` or `dir`.
    pub kind: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub executable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/volumes/{name}/tree?path=`: everything under the path, recursively.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeEntryList {
    pub entries: Vec<VolumeEntry>,
}

/// The answer to a pack of blobs (`POST /v1/volumes/{name}/blobs/pack`): how many were
/// stored, and how many the volume already held (or came twice).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackStored {
    pub stored: u64,
    pub held: u64,
}

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
    StoppedByOrg,
    HitCeiling,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Canceled,
        RunStatus::StoppedByOrg,
        RunStatus::HitCeiling,
    ];

    /// Whether the run has ended and will not change again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }

    /// The wire name, `stopped_by_org`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
            RunStatus::StoppedByOrg => "stopped_by_org",
            RunStatus::HitCeiling => "hit_ceiling",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown status `{s}`; expected one of {}", names.join(", "))
            })
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    Passed,
    Failed,
    Unknown,
}

/// One check's verdict, judged by the control plane after the run exits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckVerdict {
    /// The check in its canonical form, `metrics.accuracy >= 0.8`.
    pub check: String,
    pub outcome: CheckOutcome,
    /// The value found at the check's path, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<Value>,
    /// The line written into the log, `check passed: metrics.accuracy >= 0.8 (found 0.91)`.
    pub line: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Where a run's code came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRef {
    /// The volume, like `very-cool-classifier-code`.
    pub volume: String,
    /// The tree in it, like `code/9f31c2ab`.
    pub path: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /v1/runs`, sent with an `Idempotency-Key` header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateRun {
    pub project: String,
    /// What to call it; the control plane picks one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the user typed: `train.py::run`.
    pub entrypoint: String,
    /// What the container is told: `python -u -c 'from train import run; run()'`.
    pub command: String,
    pub sku: String,
    pub gpus: u32,
    /// Cores asked for with `--cpu`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// GiB asked for with `--memory`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<u32>,
    /// The dollar ceiling in cents, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_spend_cents: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// When to ask the registry for the image (`--pull`); absent: `missing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullPolicy>,
    /// `--env` pairs, in the order given; a later one of the same key wins.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Checks in canonical form.
    #[serde(default)]
    pub checks: Vec<String>,
    /// The code to run, absent with `--no-upload`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeRef>,
    /// The telemetry layout (a `telemetry.toml`'s text), when one was given or shipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_layout: Option<String>,
    /// For an eval run, the model version it judges: `NAME`, `NAME:vN` or `NAME@sha256:…`
    /// (`NAME` alone is its latest version, resolved when the run is placed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub key: String,
    pub value: String,
}

/// A run, as the control plane keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Stable identifier, like `r_01j…`.
    pub id: String,
    /// Human name, like `run-k4t9`; unique within the org.
    pub name: String,
    pub project: String,
    pub status: RunStatus,
    /// What the user typed.
    pub entrypoint: String,
    /// What the container was told.
    pub command: String,
    pub sku: String,
    pub gpus: u32,
    /// Cores the container has.
    pub cores: u32,
    /// Memory the container has, in GiB.
    pub memory_gib: u32,
    /// What the run costs an hour, in cents.
    pub cents_per_hour: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_spend_cents: Option<i64>,
    /// Spent so far (or in all, once ended), in cents, rounded half up.
    #[serde(default)]
    pub spent_cents: i64,
    pub image: String,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub checks: Vec<String>,
    /// Verdicts, once judged (after the run exits).
    #[serde(default)]
    pub verdicts: Vec<CheckVerdict>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it ended, when it did not simply exit 0: for a failed run the last line of its
    /// log or `killed (out of memory, or stopped)`; for a run stopped by the org, the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry_layout: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Seconds it has run (so far, or in all once ended).
    #[serde(default)]
    pub duration_seconds: u64,
    /// Bytes in its log so far.
    #[serde(default)]
    pub log_bytes: u64,
    /// For an eval run, the model version it judges and its evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<RunModel>,
    /// The member who placed it (`owner` for the server's own user, and for runs placed
    /// before a control plane had members); absent from a control plane without members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_by: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The org's usage this calendar month against its limit: the catalogue's `org_usage`,
/// present when the control plane has a limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgUsage {
    pub limit_cents: i64,
    pub spent_cents: i64,
    /// The calendar month, UTC: `2026-11`.
    pub month: String,
    /// Whether the limit is reached: runs going are stopped and new ones refused.
    pub reached: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Catalogue {
    /// div-pricing's catalogue from this one, to size and price a run with div-pricing's
    /// rules: the SKUs div-pricing knows (a newer control plane's others are left out), their
    /// prices and shares, and the limits. What a client and the in-memory fake both size with.
    pub fn pricing(&self) -> div_pricing::Catalogue {
        div_pricing::Catalogue {
            skus: self
                .skus
                .iter()
                .filter_map(|s| {
                    Some(div_pricing::SkuPrice {
                        sku: s.name.parse().ok()?,
                        cents_per_hour: s.cents_per_hour,
                        cores_per_unit: s.cores_per_unit,
                        memory_gib_per_unit: s.memory_gib_per_unit,
                    })
                })
                .collect(),
            extra_core_cents_per_hour: self.extra_core_cents_per_hour,
            extra_gib_cents_per_hour: self.extra_gib_cents_per_hour,
            max_cores: self.max_cores,
            max_memory_gib: self.max_memory_gib,
            max_run_seconds: self.max_run_seconds,
        }
    }

    /// The org's usage this month, when the control plane has a usage limit and says so
    /// (`org_usage`, kept in [`Catalogue::extra`]).
    pub fn org_usage(&self) -> Option<OrgUsage> {
        self.extra
            .get("org_usage")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

/// Why a queued run waits: the run's `queue` field, present only while it is queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQueue {
    /// What it waits for, in words: `waiting for 2 cores, 1 run ahead`.
    pub reason: String,
    /// How many queued runs are ahead of it (runs start strictly in order).
    pub ahead: u32,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Run {
    /// Why it waits, while it is queued and the control plane says so (the `queue` field,
    /// kept in [`Run::extra`] so that a control plane that does not send it, or sends more,
    /// is read all the same). `None` when it is absent or not a queue object.
    pub fn queue(&self) -> Option<RunQueue> {
        self.extra
            .get("queue")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// Keeps, in [`Run::extra`], each field `raw` (the JSON this run was read from) sent as
    /// `null`: typed, such a field is `None` and would be dropped on output, so printing the
    /// run (`--json`) would lose it. Clients call this on every run they read, so the object
    /// is printed as the API sent it.
    ///
    /// A field kept this way and later set on the typed run would be written twice; runs
    /// read from the API are shown, not edited.
    pub fn keep_nulls_from(&mut self, raw: &Value) {
        if let Some(object) = raw.as_object() {
            for (key, value) in object {
                if value.is_null() {
                    self.extra.insert(key.clone(), Value::Null);
                }
            }
        }
    }
}

/// `GET /v1/runs` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRuns {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only the runs this member placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_by: Option<String>,
}

/// The answer to `POST /v1/runs/validate` when the run would be placed (a refusal is an
/// error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunValidated {
    /// Always `true`.
    pub valid: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunList {
    pub runs: Vec<Run>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A run's result: the JSON object it wrote to `DIVERGENT_RESULT_PATH`, with the verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub run: String,
    /// The object, absent when the run wrote none (or wrote something that is not an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the result is absent or was not used, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    #[serde(default)]
    pub verdicts: Vec<CheckVerdict>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One telemetry point: a JSON object the run wrote as a line of `telemetry.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryPoint {
    /// Its line number in the file, from 1.
    pub line: u64,
    pub point: Value,
}

/// `GET /v1/runs/{run}/telemetry?after=N`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    pub run: String,
    pub points: Vec<TelemetryPoint>,
    /// Lines that were not a JSON object, reported rather than fatal.
    #[serde(default)]
    pub bad_lines: Vec<BadLine>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A telemetry line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadLine {
    pub line: u64,
    pub error: String,
}

/// `PUT /v1/secrets/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetSecret {
    pub value: String,
}

/// `GET /v1/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// A secret's name and dates; its value is never returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretInfo {
    pub name: String,
    pub updated_at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The stable shape of every error the API returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiErrorBody {
    pub error: ApiErrorDetail,
}

/// The inside of [`ApiErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiErrorDetail {
    /// A stable machine-readable code: `not_found`, `invalid`, `unknown_sku`, `conflict`,
    /// `unauthorized`, `unavailable`, `internal`.
    pub code: String,
    /// What was wrong, for a person.
    pub message: String,
    /// Anything else useful, like `{"accepted": ["b300", "h200", "h100", "cpu"]}`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// A piece of a run's log stream.
#[derive(Debug, Clone, PartialEq)]
pub enum LogEvent {
    /// Bytes of the log starting at `offset`.
    Chunk { offset: u64, data: bytes::Bytes },
    /// Without `follow`: the log has no more bytes now (the run goes on); `offset` is where
    /// a later read resumes. The stream ends after it.
    Tail { offset: u64 },
    /// The run has ended and every byte was delivered: the run as it ended.
    End(Box<Run>),
}

/// The answer to `POST /v1/dashboard`: the local control plane's dashboard, on loopback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashboardLink {
    /// `http://127.0.0.1:PORT/?token=…`: opens the dashboard once.
    pub url: String,
    /// `127.0.0.1:PORT`
    pub address: String,
}
