//! [`FakeControlPlane`]: an in-memory [`ControlPlane`], no HTTP, that passes the
//! conformance suite. Runs do not execute: they stay `queued` until stopped or finished
//! with [`FakeControlPlane::finish_run`]; a followed log waits for that, as the server's does.
//!
//! Why one long file: the fake is one in-memory model of the whole contract (runs, logs,
//! volumes, blobs, secrets, telemetry) whose parts share one state; split by route, each part
//! would reach into the others' maps. It is dev-only and mirrors the server route by route.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use div_api::{
    ApiError, BadLine, BlobSource, ByteSink, CachedImage, Catalogue, CommitTree, CommittedTree,
    ControlPlane, CreateRun, EntryKind, ErrorKind, ImageCache, ImageDisk, ListRuns, LogEvent,
    LogStream, MissingBlobs, PruneImages, PrunedImages, Route, Run, RunList, RunResult, RunStatus,
    SecretInfo, SkuOffer, StagedTree, Telemetry, TelemetryPoint, Volume, VolumeEntry,
};
use div_pricing::SizeRequest;
use div_spec::{MemoryGib, UnknownSku};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

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
struct FakeVolume {
    created_at: String,
    blobs: HashMap<String, Bytes>,
    partial: HashMap<String, Vec<u8>>,
    /// Committed paths: files, links, and the trees themselves.
    files: BTreeMap<String, FakeFile>,
    trees: BTreeMap<String, Vec<div_api::TreeEntry>>,
}

#[derive(Clone)]
struct FakeFile {
    kind: EntryKind,
    data: Bytes,
    executable: bool,
    target: Option<String>,
}

#[derive(Default)]
struct State {
    volumes: BTreeMap<String, FakeVolume>,
    /// Oldest first.
    runs: Vec<Run>,
    logs: HashMap<String, Vec<u8>>,
    /// Each run's telemetry file, as the run wrote it.
    telemetry: HashMap<String, String>,
    keys: HashMap<String, (Value, String)>,
    secrets: BTreeMap<String, (String, SecretInfo)>,
    next: u64,
    /// Staged trees by id, with their volume ([`FakeStages`]).
    stages: HashMap<String, (String, CommitTree)>,
    /// How many trees were staged, and how many packs were sent for a stage.
    staged: u64,
    staged_packs: u64,
    /// The image cache, oldest first ([`FakeControlPlane::add_image`]).
    images: Vec<CachedImage>,
}

/// How the fake answers staged commits ([`ControlPlane::stage_tree`]).
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
    catalogue: Option<Catalogue>,
    stages: FakeStages,
    /// Past this many GPUs a run takes whole nodes of them, as on the Slurm executor: a count
    /// that is not whole nodes is refused, as only the control plane can.
    nodes_of: Option<u32>,
    state: Mutex<State>,
    /// Told whenever a run ends or its log grows, for followed logs waiting on it.
    changed: tokio::sync::Notify,
    /// How many times each route of the table was asked ([`FakeControlPlane::calls`]).
    calls: Mutex<BTreeMap<Route, u64>>,
}

impl std::fmt::Debug for FakeControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeControlPlane").finish_non_exhaustive()
    }
}

fn not_found(what: &str, name: &str) -> ApiError {
    ApiError::from_server(
        ErrorKind::NotFound,
        "not_found".to_owned(),
        format!("no {what} `{name}`"),
        Value::Null,
    )
}

fn invalid(message: String, details: Value) -> ApiError {
    ApiError::from_server(ErrorKind::Refused, "invalid".to_owned(), message, details)
}

/// A volume's name as a route gives it, or the server's refusal (div-spec's rule), before
/// the volume is looked for.
fn volume_name(name: &str) -> Result<(), ApiError> {
    name.parse::<div_spec::VolumeName>()
        .map(drop)
        .map_err(|e| invalid(e.to_string(), Value::Null))
}

/// The server's refusal of the names a run gives (div-spec's rules), before anything else.
fn run_names(run: &CreateRun) -> Result<(), ApiError> {
    if run.project.trim().is_empty() {
        return Err(invalid("the run has no project".to_owned(), Value::Null));
    }
    div_spec::check_project_name(&run.project).map_err(|e| invalid(e.to_string(), Value::Null))?;
    if let Some(name) = &run.name {
        div_spec::check_run_name(name).map_err(|e| invalid(e.to_string(), Value::Null))?;
    }
    if let Some(code) = &run.code {
        volume_name(&code.volume)?;
        if !div_spec::is_volume_path(&code.path) {
            return Err(invalid(
                format!(
                    "the code's path `{}` is not a path inside a volume",
                    code.path
                ),
                Value::Null,
            ));
        }
    }
    Ok(())
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

    fn called(&self, route: Route) {
        *self
            .calls
            .lock()
            .expect("no test panicked while counting")
            .entry(route)
            .or_default() += 1;
    }

    /// The image cache holds `reference` (unpacked from `compressed_bytes` into
    /// `unpacked_bytes`), as if a pull had put it there (all of it downloaded, its tag
    /// resolved at the fake's time); its digest is made of its name. The fake pulls
    /// nothing: `pull_image` is the trait's default.
    pub fn add_image(&self, reference: &str, compressed_bytes: u64, unpacked_bytes: u64) {
        let digest = format!("sha256:{}", blake3::hash(reference.as_bytes()).to_hex());
        self.state().images.push(CachedImage {
            digest,
            references: vec![reference.to_owned()],
            resolved: vec![div_api::ResolvedReference {
                reference: reference.to_owned(),
                resolved_at: FAKE_TIME.to_owned(),
            }],
            downloaded_bytes: Some(compressed_bytes),
            compressed_bytes,
            unpacked_bytes,
            extra: Default::default(),
        });
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("no test panicked while holding the fake's lock")
    }

    /// A run writes `bytes` to its log: it is `running` from its first bytes on.
    pub fn append_log(&self, run: &str, bytes: &[u8]) -> Result<(), ApiError> {
        {
            let mut state = self.state();
            let found = find_run(&state.runs, run)?;
            let id = state.runs[found].id.clone();
            let log = state.logs.entry(id).or_default();
            log.extend_from_slice(bytes);
            let len = log.len() as u64;
            let r = &mut state.runs[found];
            if r.status == RunStatus::Queued {
                r.status = RunStatus::Running;
                r.started_at = Some(FAKE_TIME.to_owned());
            }
            r.log_bytes = len;
        }
        self.changed.notify_waiters();
        Ok(())
    }

    /// End a run as if it had run: `log` is its whole log.
    pub fn finish_run(&self, run: &str, log: &[u8], exit_code: i32) -> Result<Run, ApiError> {
        let mut state = self.state();
        let found = find_run(&state.runs, run)?;
        let id = state.runs[found].id.clone();
        state.logs.insert(id, log.to_vec());
        let r = &mut state.runs[found];
        r.status = if exit_code == 0 {
            RunStatus::Succeeded
        } else {
            RunStatus::Failed
        };
        r.exit_code = Some(exit_code);
        r.ended_at = Some(FAKE_TIME.to_owned());
        r.log_bytes = log.len() as u64;
        let ended = r.clone();
        drop(state);
        self.changed.notify_waiters();
        Ok(ended)
    }
}

impl FakeControlPlane {
    /// The run's telemetry file (`DIVERGENT_TELEMETRY_PATH`) now holds `jsonl`, as if the run
    /// had written it: read back the way the local control plane reads it, one JSON object a
    /// line, blank lines skipped, any other line a bad line.
    pub fn write_telemetry(&self, run: &str, jsonl: &str) -> Result<(), ApiError> {
        let mut state = self.state();
        let found = find_run(&state.runs, run)?;
        let id = state.runs[found].id.clone();
        state.telemetry.insert(id, jsonl.to_owned());
        Ok(())
    }
}

impl FakeControlPlane {
    /// What the server refuses of `run` before it places it, as far as the fake can tell
    /// (`validate_run` and `create_run` alike; a name taken is the callers'): the SKU, the
    /// size (div-pricing's rules), whole nodes ([`FakeControlPlane::with_nodes_of`]), the
    /// ceiling, the checks, the project, the code.
    fn refuse(&self, state: &State, run: &CreateRun) -> Result<div_pricing::Sizing, ApiError> {
        run_names(run)?;
        let catalogue = self.catalogue.clone().unwrap_or_else(sample_catalogue);
        if !catalogue.skus.iter().any(|s| s.name == run.sku) {
            let accepted: Vec<&str> = catalogue.skus.iter().map(|s| s.name.as_str()).collect();
            return Err(ApiError::from_server(
                ErrorKind::Refused,
                "unknown_sku".to_owned(),
                format!("unknown SKU `{}`", run.sku),
                json!({ "accepted": accepted }),
            ));
        }
        // Sized and priced by div-pricing's rules, as div-server sizes them.
        let sizing = catalogue
            .pricing()
            .size(&SizeRequest {
                sku: run.sku.parse().map_err(|e: UnknownSku| {
                    invalid(format!("unknown SKU `{}`: {e}", run.sku), Value::Null)
                })?,
                gpus: run.gpus,
                cpu: run.cpu,
                memory: run.memory_gib.map(MemoryGib::new),
            })
            .map_err(|e| invalid(e.to_string(), Value::Null))?;
        let gpus = sizing.gpus;
        if let Some(per) = self.nodes_of
            && gpus > per
            && !gpus.is_multiple_of(per)
        {
            let below = gpus / per * per;
            return Err(invalid(
                format!(
                    "`--gpus {gpus}`: past {per} GPUs a run takes whole nodes of {per} GPUs; ask for `--gpus {below}` or `--gpus {}`",
                    below + per
                ),
                Value::Null,
            ));
        }
        if let Some(cents) = run.max_spend_cents
            && cents <= 0
        {
            return Err(invalid(
                format!("`max_spend_cents` must be more than 0, not `{cents}`"),
                Value::Null,
            ));
        }
        if let Some(e) = run
            .checks
            .iter()
            .find_map(|c| c.parse::<div_spec::Check>().err())
        {
            return Err(invalid(e.to_string(), Value::Null));
        }
        if let Some(code) = &run.code
            && !state
                .volumes
                .get(&code.volume)
                .is_some_and(|v| v.trees.contains_key(&code.path))
        {
            return Err(invalid(
                format!(
                    "the code `{}/{}` is not in a volume",
                    code.volume, code.path
                ),
                Value::Null,
            ));
        }
        Ok(sizing)
    }
}

/// The refusal of a run named like one that exists.
fn name_taken(state: &State, run: &CreateRun) -> Result<(), ApiError> {
    match &run.name {
        Some(name) if state.runs.iter().any(|r| &r.name == name) => Err(ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("a run is already named `{name}`"),
            Value::Null,
        )),
        _ => Ok(()),
    }
}

/// Points and bad lines of a telemetry file past line `after`, as div-server reads them.
fn read_telemetry(jsonl: &str, after: u64) -> (Vec<TelemetryPoint>, Vec<BadLine>) {
    let (mut points, mut bad) = (Vec::new(), Vec::new());
    for (i, line) in jsonl.lines().enumerate() {
        let line_no = i as u64 + 1;
        if line_no <= after || line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(point @ Value::Object(_)) => points.push(TelemetryPoint {
                line: line_no,
                point,
            }),
            Ok(_) => bad.push(BadLine {
                line: line_no,
                error: "not a JSON object".to_owned(),
            }),
            Err(e) => bad.push(BadLine {
                line: line_no,
                error: e.to_string(),
            }),
        }
    }
    (points, bad)
}

fn find_run(runs: &[Run], run: &str) -> Result<usize, ApiError> {
    runs.iter()
        .position(|r| r.id == run || r.name == run)
        .ok_or_else(|| not_found("run", run))
}

/// Whether a tree path is relative, `/`-separated, without `.`/`..` or empty components.
fn good_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[async_trait]
impl ControlPlane for FakeControlPlane {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.called(Route::Catalogue);
        Ok(self.catalogue.clone().unwrap_or_else(sample_catalogue))
    }

    async fn list_images(&self) -> Result<ImageCache, ApiError> {
        self.called(Route::ListImages);
        let images = self.state().images.clone();
        let disk = ImageDisk {
            blobs: images.iter().map(|i| i.compressed_bytes).sum(),
            images: images.iter().map(|i| i.unpacked_bytes).sum(),
            tmp: 0,
        };
        Ok(ImageCache {
            path: FAKE_IMAGES.to_owned(),
            images,
            disk,
            extra: Default::default(),
        })
    }

    async fn prune_images(&self, _prune: &PruneImages) -> Result<PrunedImages, ApiError> {
        self.called(Route::PruneImages);
        let mut state = self.state();
        // As the server keeps them: the images of runs that have not ended.
        let in_use: Vec<String> = state
            .runs
            .iter()
            .filter(|r| !r.status.is_terminal())
            .map(|r| r.image.clone())
            .collect();
        let (kept, gone): (Vec<CachedImage>, Vec<CachedImage>) = std::mem::take(&mut state.images)
            .into_iter()
            .partition(|i| i.references.iter().any(|r| in_use.contains(r)));
        state.images = kept;
        Ok(PrunedImages {
            images: gone.iter().map(|i| i.digest.clone()).collect(),
            // The manifest, the config and one layer each.
            blobs: 3 * gone.len() as u64,
            bytes: gone.iter().map(|i| i.unpacked_bytes).sum(),
            kept: state.images.len() as u64,
            extra: Default::default(),
        })
    }

    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        self.called(Route::ListVolumes);
        Ok(self
            .state()
            .volumes
            .iter()
            .map(|(name, v)| Volume {
                name: name.clone(),
                created_at: v.created_at.clone(),
                size_bytes: v.files.values().map(|f| f.data.len() as u64).sum(),
                extra: Default::default(),
            })
            .collect())
    }

    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError> {
        self.called(Route::CreateVolume);
        // The server's rule: a volume name (div-spec's).
        volume_name(name)?;
        let mut state = self.state();
        let v = state
            .volumes
            .entry(name.to_owned())
            .or_insert_with(|| FakeVolume {
                created_at: FAKE_TIME.to_owned(),
                ..FakeVolume::default()
            });
        Ok(Volume {
            name: name.to_owned(),
            created_at: v.created_at.clone(),
            size_bytes: v.files.values().map(|f| f.data.len() as u64).sum(),
            extra: Default::default(),
        })
    }

    async fn delete_volume(&self, name: &str) -> Result<(), ApiError> {
        self.called(Route::DeleteVolume);
        volume_name(name)?;
        self.state()
            .volumes
            .remove(name)
            .map(drop)
            .ok_or_else(|| not_found("volume", name))
    }

    async fn missing_blobs(
        &self,
        volume: &str,
        hashes: &[String],
    ) -> Result<MissingBlobs, ApiError> {
        self.called(Route::MissingBlobs);
        volume_name(volume)?;
        let state = self.state();
        let v = state
            .volumes
            .get(volume)
            .ok_or_else(|| not_found("volume", volume))?;
        let missing: Vec<String> = hashes
            .iter()
            .filter(|h| !v.blobs.contains_key(*h))
            .cloned()
            .collect();
        let partial = missing
            .iter()
            .filter_map(|h| v.partial.get(h).map(|p| (h.clone(), p.len() as u64)))
            .collect();
        Ok(MissingBlobs {
            missing,
            partial,
            extra: Default::default(),
        })
    }

    async fn upload_blob(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        self.called(Route::UploadBlob);
        volume_name(volume)?;
        let bytes = match data {
            BlobSource::Bytes(b) => b.to_vec(),
            BlobSource::File { path, offset, len } => {
                let all = std::fs::read(&path).map_err(|e| {
                    ApiError::new(
                        ErrorKind::Io,
                        format!("could not read `{}`: {e}", path.display()),
                    )
                })?;
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(all.len());
                let end = usize::try_from(offset + len)
                    .unwrap_or(usize::MAX)
                    .min(all.len());
                all[start..end].to_vec()
            }
        };
        let mut state = self.state();
        let v = state
            .volumes
            .get_mut(volume)
            .ok_or_else(|| not_found("volume", volume))?;
        if v.blobs.contains_key(hash) {
            return Ok(());
        }
        let have = v.partial.get(hash).map_or(0, |p| p.len() as u64);
        if offset != have {
            return Err(ApiError::from_server(
                ErrorKind::Conflict,
                "offset_mismatch".to_owned(),
                format!("blob `{hash}` has {have} bytes, not {offset}"),
                json!({ "received": have }),
            ));
        }
        let partial = v.partial.entry(hash.to_owned()).or_default();
        partial.extend_from_slice(&bytes);
        if partial.len() as u64 > total {
            v.partial.remove(hash);
            return Err(invalid(
                format!("blob `{hash}` is longer than {total} bytes"),
                Value::Null,
            ));
        }
        if partial.len() as u64 == total {
            let whole = v.partial.remove(hash).unwrap_or_default();
            let actual = blake3::hash(&whole).to_hex().to_string();
            if actual != hash {
                return Err(ApiError::from_server(
                    ErrorKind::Refused,
                    "hash_mismatch".to_owned(),
                    format!("blob `{hash}` hashes to `{actual}`"),
                    json!({ "actual": actual }),
                ));
            }
            v.blobs.insert(hash.to_owned(), Bytes::from(whole));
        }
        Ok(())
    }

    async fn stage_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<Option<StagedTree>, ApiError> {
        self.called(Route::StageTree);
        if self.stages == FakeStages::None {
            return Ok(None);
        }
        volume_name(volume)?;
        let mut hashes: Vec<String> = tree
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .filter_map(|e| e.hash.clone())
            .collect();
        hashes.sort();
        hashes.dedup();
        // No volume: no stage, as a server answers (404, which the client takes as `None`).
        let Ok(missing) = self.missing_blobs(volume, &hashes).await else {
            return Ok(None);
        };
        let mut state = self.state();
        state.staged += 1;
        let id = format!("stage-{}", state.staged);
        state
            .stages
            .insert(id.clone(), (volume.to_owned(), tree.clone()));
        Ok(Some(StagedTree {
            id,
            missing: missing.missing,
            partial: missing.partial,
            extra: Default::default(),
        }))
    }

    async fn upload_staged_pack(
        &self,
        volume: &str,
        stage: &str,
        blobs: &[div_api::PackBlob],
    ) -> Result<(), ApiError> {
        self.called(Route::UploadPack);
        volume_name(volume)?;
        {
            let mut state = self.state();
            if state.stages.get(stage).is_none_or(|(v, _)| v != volume) {
                return Err(not_found("stage", stage));
            }
            state.staged_packs += 1;
        }
        self.upload_pack(volume, blobs).await
    }

    async fn commit_stage(&self, volume: &str, stage: &str) -> Result<CommittedTree, ApiError> {
        self.called(Route::CommitStage);
        volume_name(volume)?;
        let taken = self.state().stages.remove(stage);
        let tree = match taken {
            Some((v, tree)) if v == volume && self.stages == FakeStages::Kept => tree,
            _ => return Err(not_found("stage", stage)),
        };
        self.commit_tree(volume, &tree).await
    }

    async fn commit_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<CommittedTree, ApiError> {
        self.called(Route::CommitTree);
        volume_name(volume)?;
        let mut state = self.state();
        let v = state
            .volumes
            .get_mut(volume)
            .ok_or_else(|| not_found("volume", volume))?;
        if !tree.path.is_empty() && !good_path(&tree.path) {
            return Err(invalid(
                format!("bad tree path `{}`", tree.path),
                Value::Null,
            ));
        }
        let bad: Vec<&str> = tree
            .entries
            .iter()
            .filter(|e| !good_path(&e.path))
            .map(|e| e.path.as_str())
            .collect();
        if !bad.is_empty() {
            return Err(invalid(
                format!("bad paths in the tree: `{}`", bad.join("`, `")),
                json!({ "paths": bad }),
            ));
        }
        let missing: Vec<String> = tree
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .filter_map(|e| e.hash.clone())
            .filter(|h| !v.blobs.contains_key(h))
            .collect();
        if !missing.is_empty() {
            return Err(invalid(
                format!("{} blobs of the tree were never sent", missing.len()),
                json!({ "missing": missing }),
            ));
        }
        let files = tree
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .count() as u64;
        let bytes = tree.entries.iter().map(|e| e.size).sum();
        let committed = CommittedTree {
            volume: volume.to_owned(),
            path: tree.path.clone(),
            files,
            bytes,
            digest: None,
            extra: Default::default(),
        };
        if tree.path.is_empty() {
            return add_to_root(v, volume, tree, committed);
        }
        if let Some(existing) = v.trees.get(&tree.path) {
            if *existing == tree.entries {
                return Ok(committed);
            }
            return Err(ApiError::from_server(
                ErrorKind::Conflict,
                "conflict".to_owned(),
                format!("`{}` already holds another tree", tree.path),
                Value::Null,
            ));
        }
        for e in &tree.entries {
            let data = e
                .hash
                .as_ref()
                .and_then(|h| v.blobs.get(h).cloned())
                .unwrap_or_default();
            v.files.insert(
                format!("{}/{}", tree.path, e.path),
                FakeFile {
                    kind: e.kind,
                    data,
                    executable: e.executable,
                    target: e.target.clone(),
                },
            );
        }
        v.trees.insert(tree.path.clone(), tree.entries.clone());
        Ok(committed)
    }

    async fn list_tree(&self, volume: &str, path: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        self.called(Route::ListTree);
        volume_name(volume)?;
        let state = self.state();
        let v = state
            .volumes
            .get(volume)
            .ok_or_else(|| not_found("volume", volume))?;
        let prefix = path.trim_end_matches('/');
        let under =
            |p: &str| prefix.is_empty() || p == prefix || p.starts_with(&format!("{prefix}/"));
        Ok(v.files
            .iter()
            .filter(|(p, _)| under(p))
            .map(|(p, f)| VolumeEntry {
                path: p.clone(),
                kind: match f.kind {
                    EntryKind::File => "file",
                    EntryKind::Symlink => "symlink",
                }
                .to_owned(),
                size: f.data.len() as u64,
                executable: f.executable,
                target: f.target.clone(),
                extra: Default::default(),
            })
            .collect())
    }

    async fn read_file(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        self.called(Route::ReadFile);
        volume_name(volume)?;
        let data = {
            let state = self.state();
            let v = state
                .volumes
                .get(volume)
                .ok_or_else(|| not_found("volume", volume))?;
            match v.files.get(path) {
                Some(f) if f.kind == EntryKind::File => f.data.clone(),
                _ => return Err(not_found("file", path)),
            }
        };
        sink.write_all(&data)
            .await
            .map_err(|e| ApiError::new(ErrorKind::Io, format!("could not write `{path}`: {e}")))?;
        Ok(data.len() as u64)
    }

    async fn validate_run(&self, run: &CreateRun) -> Result<(), ApiError> {
        self.called(Route::ValidateRun);
        let state = self.state();
        self.refuse(&state, run)?;
        name_taken(&state, run)
    }

    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError> {
        self.called(Route::CreateRun);
        let body = serde_json::to_value(run).expect("a CreateRun serializes");
        let mut state = self.state();
        let sizing = self.refuse(&state, run)?;
        if let Some((seen, id)) = state.keys.get(idempotency_key) {
            if *seen == body {
                let id = id.clone();
                let i = find_run(&state.runs, &id)?;
                return Ok(state.runs[i].clone());
            }
            return Err(ApiError::from_server(
                ErrorKind::Conflict,
                "conflict".to_owned(),
                format!("idempotency key `{idempotency_key}` was used with another body"),
                Value::Null,
            ));
        }
        name_taken(&state, run)?;
        state.next += 1;
        let n = state.next;
        let created = Run {
            id: format!("r_fake{n:04}"),
            name: run.name.clone().unwrap_or_else(|| format!("run-f{n:03}")),
            project: run.project.clone(),
            status: RunStatus::Queued,
            entrypoint: run.entrypoint.clone(),
            command: run.command.clone(),
            sku: run.sku.clone(),
            gpus: sizing.gpus,
            cores: sizing.cores,
            memory_gib: sizing.memory_gib,
            cents_per_hour: sizing.rate.cents_per_hour(),
            max_spend_cents: run.max_spend_cents,
            spent_cents: 0,
            image: run.image.clone().unwrap_or_else(|| "default".to_owned()),
            env: run.env.clone(),
            checks: run.checks.clone(),
            verdicts: Vec::new(),
            exit_code: None,
            reason: None,
            code: run.code.clone(),
            telemetry_layout: run.telemetry_layout.clone(),
            created_at: FAKE_TIME.to_owned(),
            started_at: None,
            ended_at: None,
            duration_seconds: 0,
            log_bytes: 0,
            extra: Default::default(),
        };
        state
            .keys
            .insert(idempotency_key.to_owned(), (body, created.id.clone()));
        state.runs.push(created.clone());
        Ok(created)
    }

    async fn get_run(&self, run: &str) -> Result<Run, ApiError> {
        self.called(Route::GetRun);
        let state = self.state();
        let i = find_run(&state.runs, run)?;
        Ok(state.runs[i].clone())
    }

    async fn list_runs(&self, query: &ListRuns) -> Result<RunList, ApiError> {
        self.called(Route::ListRuns);
        let state = self.state();
        // A project outside the rule, unless runs of it are held (the server lists what it
        // stored before the rule).
        if let Some(project) = &query.project
            && let Err(e) = div_spec::check_project_name(project)
            && !state.runs.iter().any(|r| &r.project == project)
        {
            return Err(invalid(e.to_string(), Value::Null));
        }
        let start: usize = match &query.cursor {
            None => 0,
            Some(c) => c
                .parse()
                .map_err(|_| invalid(format!("bad cursor `{c}`"), Value::Null))?,
        };
        let limit = query.limit.unwrap_or(50) as usize;
        let matching: Vec<&Run> = state
            .runs
            .iter()
            .rev()
            .filter(|r| query.project.as_ref().is_none_or(|p| &r.project == p))
            .filter(|r| query.status.is_none_or(|s| r.status == s))
            .collect();
        let runs: Vec<Run> = matching
            .iter()
            .skip(start)
            .take(limit)
            .map(|r| (*r).clone())
            .collect();
        let next = start + runs.len();
        Ok(RunList {
            runs,
            next_cursor: (next < matching.len()).then(|| next.to_string()),
            extra: Default::default(),
        })
    }

    async fn stop_run(&self, run: &str) -> Result<Run, ApiError> {
        self.called(Route::StopRun);
        let stopped = {
            let mut state = self.state();
            let i = find_run(&state.runs, run)?;
            let r = &mut state.runs[i];
            if !r.status.is_terminal() {
                r.status = RunStatus::Canceled;
                r.ended_at = Some(FAKE_TIME.to_owned());
                r.reason = Some("stopped".to_owned());
            }
            r.clone()
        };
        self.changed.notify_waiters();
        Ok(stopped)
    }

    /// The fake runs every run on this one machine: no run has nodes' logs, as on the real
    /// server without Slurm.
    async fn node_log(
        &self,
        run: &str,
        node: u32,
        _offset: u64,
        _follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        self.called(Route::Log);
        let state = self.state();
        let r = &state.runs[find_run(&state.runs, run)?];
        Err(ApiError::from_server(
            ErrorKind::NotFound,
            "not_found".to_owned(),
            format!(
                "run `{}` ran on one machine, not on several nodes: it has no node {node} (its log is `div logs {}`)",
                r.name, r.name
            ),
            Value::Null,
        ))
    }

    async fn log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        self.called(Route::Log);
        loop {
            // Armed before the look, so an end between the look and the wait is not missed.
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            {
                let state = self.state();
                let i = find_run(&state.runs, run)?;
                let r = &state.runs[i];
                let log = state.logs.get(&r.id).cloned().unwrap_or_default();
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(log.len());
                let mut events = Vec::new();
                if start < log.len() {
                    events.push(LogEvent::Chunk {
                        offset: start as u64,
                        data: Bytes::copy_from_slice(&log[start..]),
                    });
                }
                // A followed log of a run still going waits for bytes or its end, as the
                // server's does; otherwise it says where the log stands.
                if !events.is_empty() || r.status.is_terminal() || !follow {
                    events.push(if r.status.is_terminal() {
                        LogEvent::End(Box::new(r.clone()))
                    } else {
                        LogEvent::Tail {
                            offset: log.len() as u64,
                        }
                    });
                    events.reverse();
                    return Ok(Box::new(FakeLog(events)));
                }
            }
            changed.await;
        }
    }

    async fn result(&self, run: &str) -> Result<RunResult, ApiError> {
        self.called(Route::Result);
        let r = self.get_run(run).await?;
        Ok(RunResult {
            run: r.id,
            result: None,
            problem: Some("the run wrote no result".to_owned()),
            verdicts: r.verdicts,
            extra: Default::default(),
        })
    }

    async fn telemetry(&self, run: &str, after: u64) -> Result<Telemetry, ApiError> {
        self.called(Route::Telemetry);
        let state = self.state();
        let r = &state.runs[find_run(&state.runs, run)?];
        let (points, bad_lines) =
            read_telemetry(state.telemetry.get(&r.id).map_or("", String::as_str), after);
        Ok(Telemetry {
            run: r.id.clone(),
            points,
            bad_lines,
            extra: Default::default(),
        })
    }

    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError> {
        self.called(Route::SetSecret);
        // The server's rule: an environment variable name (div-spec's).
        if !div_spec::is_env_key(name) {
            return Err(invalid(
                format!("`{name}` is not an environment variable name"),
                Value::Null,
            ));
        }
        let info = SecretInfo {
            name: name.to_owned(),
            updated_at: FAKE_TIME.to_owned(),
            extra: Default::default(),
        };
        self.state()
            .secrets
            .insert(name.to_owned(), (value.to_owned(), info.clone()));
        Ok(info)
    }

    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        self.called(Route::ListSecrets);
        Ok(self
            .state()
            .secrets
            .values()
            .map(|(_, i)| i.clone())
            .collect())
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ApiError> {
        self.called(Route::DeleteSecret);
        self.state()
            .secrets
            .remove(name)
            .map(drop)
            .ok_or_else(|| not_found("secret", name))
    }
}

/// A tree committed at `""` (what `div storage put` sends), as div-server puts it into the
/// volume's root, as `cp` would: each path the volume lacks is written, one it holds with
/// other content (or a link) is replaced, the same content is left as it is; a folder where
/// the tree has a file, or a file or link where it needs a folder, refuses the whole commit
/// with a conflict naming the path, before anything is written.
fn add_to_root(
    v: &mut FakeVolume,
    volume: &str,
    tree: &CommitTree,
    committed: CommittedTree,
) -> Result<CommittedTree, ApiError> {
    let conflict = |path: &str, why: &str| {
        ApiError::from_server(
            ErrorKind::Conflict,
            "conflict".to_owned(),
            format!("`{path}` in volume `{volume}` {why}"),
            json!({ "path": path }),
        )
    };
    let is_folder = |p: &str| v.files.keys().any(|k| k.starts_with(&format!("{p}/")));
    let mut new = Vec::new();
    for e in &tree.entries {
        let parts: Vec<&str> = e.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            match v.files.get(&above).map(|f| f.kind) {
                Some(EntryKind::Symlink) => {
                    return Err(conflict(
                        &above,
                        "is a link (a run may have left it), where the put has a folder; a put never writes through a link",
                    ));
                }
                Some(EntryKind::File) => {
                    return Err(conflict(
                        &above,
                        "is a file, where the put has a folder; a put replaces files, never a file with a folder",
                    ));
                }
                None => {}
            }
        }
        let data = e
            .hash
            .as_ref()
            .and_then(|h| v.blobs.get(h).cloned())
            .unwrap_or_default();
        match v.files.get(&e.path) {
            None if is_folder(&e.path) => {
                return Err(conflict(
                    &e.path,
                    "is a folder, where the put has a file; a put replaces files, never a folder",
                ));
            }
            None => new.push((e, data)),
            Some(f) => {
                let same = f.kind == e.kind
                    && match e.kind {
                        EntryKind::File => f.data == data && f.executable == e.executable,
                        EntryKind::Symlink => f.target == e.target,
                    };
                if !same {
                    new.push((e, data));
                }
            }
        }
    }
    // A committed tree never changes: writing into one is refused, naming it.
    for (e, _) in &new {
        let parts: Vec<&str> = e.path.split('/').collect();
        for depth in 1..parts.len() {
            let above = parts[..depth].join("/");
            if v.trees.contains_key(&above) {
                return Err(conflict(
                    &e.path,
                    &format!(
                        "is in the committed tree `{above}`, which never changes (runs were given it by its id); put it under another `--to`"
                    ),
                ));
            }
        }
    }
    for (e, data) in new {
        v.files.insert(
            e.path.clone(),
            FakeFile {
                kind: e.kind,
                data,
                executable: e.executable,
                target: e.target.clone(),
            },
        );
    }
    Ok(committed)
}

/// Events handed out back to front.
struct FakeLog(Vec<LogEvent>);

#[async_trait]
impl LogStream for FakeLog {
    async fn next(&mut self) -> Option<Result<LogEvent, ApiError>> {
        self.0.pop().map(Ok)
    }
}
