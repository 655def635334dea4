//! The fake's state, which every part of it shares: the volumes, runs, logs, secrets and
//! images it holds, and [`FakeControlPlane`] itself, how it is made and what it counts;
//! the refusals every part answers with.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;
use div_api::{
    ApiError, CachedImage, Catalogue, CommitTree, EntryKind, ErrorKind, Route, Run, SecretInfo,
    SkuOffer,
};
use serde_json::Value;

/// The time every record of the fake carries.
pub const FAKE_TIME: &str = "2025-01-01T00:00:00Z";

/// Where the fake says its image cache is (it has no folder: it is in memory).
pub const FAKE_IMAGES: &str = "(the fake's memory)";

/// A small catalogue: `cpu` and `h100`.
pub fn sample_catalogue() -> Catalogue {
    let sku = |name: &str, cents, cores, gib| SkuOffer {
        name: name.to_owned(),
        cents_per_hour: cents,
        cores_per_unit: cores,
        memory_gib_per_unit: gib,
        capacity: None,
        emulated: false,
        extra: Default::default(),
    };
    Catalogue {
        skus: vec![sku("h100", 495, 8, 96), sku("cpu", 10, 1, 2)],
        extra_core_cents_per_hour: 3,
        extra_gib_cents_per_hour: 1,
        max_cores: 64,
        max_memory_gib: 336,
        max_run_seconds: 86_400,
        extra: Default::default(),
    }
}

#[derive(Default)]
pub(crate) struct FakeVolume {
    pub(crate) created_at: String,
    pub(crate) blobs: HashMap<String, Bytes>,
    pub(crate) partial: HashMap<String, Vec<u8>>,
    /// Committed paths: files, links, and the trees themselves.
    pub(crate) files: BTreeMap<String, FakeFile>,
    pub(crate) trees: BTreeMap<String, Vec<div_api::TreeEntry>>,
}

#[derive(Clone)]
pub(crate) struct FakeFile {
    pub(crate) kind: EntryKind,
    pub(crate) data: Bytes,
    pub(crate) executable: bool,
    pub(crate) target: Option<String>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) volumes: BTreeMap<String, FakeVolume>,
    /// Oldest first.
    pub(crate) runs: Vec<Run>,
    pub(crate) logs: HashMap<String, Vec<u8>>,
    /// Each run's telemetry file, as the run wrote it.
    pub(crate) telemetry: HashMap<String, String>,
    pub(crate) keys: HashMap<String, (Value, String)>,
    pub(crate) secrets: BTreeMap<String, (String, SecretInfo)>,
    pub(crate) next: u64,
    /// Staged trees by id, with their volume ([`FakeStages`]).
    pub(crate) stages: HashMap<String, (String, CommitTree)>,
    /// How many trees were staged, and how many packs were sent for a stage.
    pub(crate) staged: u64,
    pub(crate) staged_packs: u64,
    /// The image cache, oldest first ([`FakeControlPlane::add_image`]).
    pub(crate) images: Vec<CachedImage>,
    /// Each model's versions, oldest first.
    pub(crate) models: BTreeMap<String, Vec<div_api::ModelVersion>>,
}

/// How the fake answers staged commits ([`div_api::ControlPlane::stage_tree`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum FakeStages {
    /// It stages nothing (as a control plane without stages): the client sends its tree the
    /// other way.
    #[default]
    None,
    /// It stages trees and commits them.
    Kept,
    /// It stages trees, but each is gone when its commit comes (as after a restart): 404.
    LostAtCommit,
}

/// An in-memory control plane.
#[derive(Default)]
pub struct FakeControlPlane {
    pub(crate) catalogue: Option<Catalogue>,
    pub(crate) stages: FakeStages,
    /// Past this many GPUs a run takes whole nodes of them, as on the Slurm executor: a count
    /// that is not whole nodes is refused, as only the control plane can.
    pub(crate) nodes_of: Option<u32>,
    pub(crate) state: Mutex<State>,
    /// Told whenever a run ends or its log grows, for followed logs waiting on it.
    pub(crate) changed: tokio::sync::Notify,
    /// How many times each route of the table was asked ([`FakeControlPlane::calls`]).
    pub(crate) calls: Mutex<BTreeMap<Route, u64>>,
}

impl std::fmt::Debug for FakeControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeControlPlane").finish_non_exhaustive()
    }
}

impl FakeControlPlane {
    /// A fake offering [`sample_catalogue`].
    pub fn new() -> Self {
        FakeControlPlane {
            catalogue: Some(sample_catalogue()),
            stages: FakeStages::None,
            nodes_of: None,
            state: Mutex::new(State::default()),
            changed: tokio::sync::Notify::new(),
            calls: Mutex::default(),
        }
    }

    /// The fake, staging trees as `how` says.
    #[must_use]
    pub fn with_stages(mut self, how: FakeStages) -> Self {
        self.stages = how;
        self
    }

    /// The fake, placing runs past `gpus` GPUs on whole nodes of `gpus`, as a Slurm-backed
    /// control plane does: `--gpus 12` on nodes of 8 is refused (by `validate_run` and
    /// `create_run` alike), with the Slurm executor's words.
    #[must_use]
    pub fn with_nodes_of(mut self, gpus: u32) -> Self {
        self.nodes_of = Some(gpus.max(1));
        self
    }

    /// How many trees were staged, and how many packs were sent for a staged tree.
    pub fn staged(&self) -> (u64, u64) {
        let state = self.state();
        (state.staged, state.staged_packs)
    }

    /// How many times the route `route` was asked: each operation counts the route a
    /// control plane over HTTP answers it at (`div_api::routes`). An operation the fake
    /// answers as a control plane without it (`pull_image`, `upload_pack`, `tree_held`)
    /// counts as what it does instead.
    pub fn calls(&self, route: Route) -> u64 {
        self.calls
            .lock()
            .expect("no test panicked while counting")
            .get(&route)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn called(&self, route: Route) {
        *self
            .calls
            .lock()
            .expect("no test panicked while counting")
            .entry(route)
            .or_default() += 1;
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("no test panicked while holding the fake's lock")
    }
}

pub(crate) fn not_found(what: &str, name: &str) -> ApiError {
    ApiError::from_server(
        ErrorKind::NotFound,
        "not_found".to_owned(),
        format!("no {what} `{name}`"),
        Value::Null,
    )
}

pub(crate) fn invalid(message: String, details: Value) -> ApiError {
    ApiError::from_server(ErrorKind::Refused, "invalid".to_owned(), message, details)
}

/// A volume's name as a route gives it, or the server's refusal (div-spec's rule), before
/// the volume is looked for.
pub(crate) fn volume_name(name: &str) -> Result<(), ApiError> {
    name.parse::<div_spec::VolumeName>()
        .map(drop)
        .map_err(|e| invalid(e.to_string(), Value::Null))
}

pub(crate) fn find_run(runs: &[Run], run: &str) -> Result<usize, ApiError> {
    runs.iter()
        .position(|r| r.id == run || r.name == run)
        .ok_or_else(|| not_found("run", run))
}

/// Whether a tree path is relative, `/`-separated, without `.`/`..` or empty components.
pub(crate) fn good_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}
