//! The div control-plane contract: API models, the [`ControlPlane`] trait and its hyper
//! client.
//!
//! The contract is written down in `docs/api/openapi.yaml`; the models here follow it and a
//! test fails when they drift. Anything that speaks it — the hosted service, the local
//! control plane in `div-server`, or an embedder's own — is a [`ControlPlane`].
//!
//! # The log stream
//!
//! `GET /v1/runs/{run}/log?offset=N&follow=true` answers `application/vnd.div.log`, a
//! sequence of frames, each a header line then, for some, a body:
//!
//! - `chunk <offset> <len>\n` then `len` bytes: the log's bytes from `offset`;
//! - `beat\n`: nothing new yet (sent while following, so a dead connection is noticed);
//! - `tail <offset>\n`: without `follow`, the log has no more bytes now and the run goes on;
//! - `end <len>\n` then `len` bytes of JSON: the run as it ended; every byte was sent.
//!
//! A reader that loses the connection asks again from the last offset it delivered, so it
//! sees every byte exactly once.

mod calls;
mod client;
mod display;
mod endpoint;
mod error;
pub mod layout;
mod log_stream;
pub mod logframe;
pub mod models;
mod options;
pub mod pack;
mod read_file;
mod retry;
pub mod routes;
mod team;
mod tls;
mod transport;
mod upload;

use std::path::PathBuf;

use async_trait::async_trait;
use bytes::Bytes;

pub use client::HttpControlPlane;
pub use endpoint::{Endpoint, EndpointError};
pub use error::{ApiError, ErrorKind, error_chain};
pub use models::*;
pub use options::{Options, Token};
pub use pack::{PACK_BLOB_MAX_BYTES, PACK_MAX_BYTES, PackBlob, PackError, pack_frame, parse_pack};
pub use routes::{IDEMPOTENCY_KEY, Route};
pub use team::Team;

/// Where the bytes of a blob upload come from.
#[derive(Debug, Clone)]
pub enum BlobSource {
    /// Bytes in memory.
    Bytes(Bytes),
    /// `len` bytes of a file, starting at `offset`.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

impl BlobSource {
    /// How many bytes it holds.
    pub fn len(&self) -> u64 {
        match self {
            BlobSource::Bytes(b) => b.len() as u64,
            BlobSource::File { len, .. } => *len,
        }
    }
    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same source without its first `n` bytes (all of them when `n` is past the end).
    pub fn skip(&self, n: u64) -> BlobSource {
        match self {
            BlobSource::Bytes(b) => {
                let n = usize::try_from(n).unwrap_or(usize::MAX).min(b.len());
                BlobSource::Bytes(b.slice(n..))
            }
            BlobSource::File { path, offset, len } => {
                let n = n.min(*len);
                BlobSource::File {
                    path: path.clone(),
                    offset: offset + n,
                    len: len - n,
                }
            }
        }
    }
}

/// What [`upload_blob_resuming`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadOutcome {
    /// The volume had the blob already; nothing was sent.
    AlreadyThere,
    /// The blob was sent from `from` (0, or where an earlier partial upload stopped).
    Sent { from: u64 },
}

/// The blobs of a pack sent one request each, by [`ControlPlane::upload_blob`]: what a
/// control plane without packs gets.
pub(crate) async fn upload_one_by_one<C: ControlPlane + ?Sized>(
    cp: &C,
    volume: &str,
    blobs: &[PackBlob],
) -> Result<(), ApiError> {
    for blob in blobs {
        let data = BlobSource::Bytes(blob.data.clone());
        cp.upload_blob(volume, &blob.hash, 0, blob.data.len() as u64, data)
            .await?;
    }
    Ok(())
}

/// What a control plane without an image cache answers [`ControlPlane::list_images`].
fn no_models() -> ApiError {
    ApiError::new(ErrorKind::NotFound, "this control plane keeps no models")
}

fn no_image_cache() -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        "this control plane keeps no image cache",
    )
}

/// Send a whole blob to `volume`, from where an earlier partial upload stopped: asks
/// [`ControlPlane::missing_blobs`] how much already arrived, then sends the rest with one
/// [`ControlPlane::upload_blob`]. `blob` holds the whole blob.
///
/// Resuming across dropped connections is [`HttpControlPlane`]'s `upload_blob`'s job, and
/// only its: it learns how much arrived after each failure and goes on while the server's
/// count grows, within [`Options::deadline`] since it last grew (see `upload.rs`). This
/// function adds no loop of its own.
///
/// A `hash_mismatch` refusal is returned as is: the server has discarded the partial, and
/// the bytes on disk are not the ones hashed.
pub async fn upload_blob_resuming(
    cp: &dyn ControlPlane,
    volume: &str,
    hash: &str,
    blob: &BlobSource,
) -> Result<UploadOutcome, ApiError> {
    let total = blob.len();
    let missing = cp.missing_blobs(volume, &[hash.to_owned()]).await?;
    if !missing.missing.iter().any(|h| h == hash) {
        return Ok(UploadOutcome::AlreadyThere);
    }
    let from = missing.partial.get(hash).copied().unwrap_or(0);
    // More than the blob is not a partial of it: the server discards it and takes all.
    let from = if from > total { 0 } else { from };
    cp.upload_blob(volume, hash, from, total, blob.skip(from))
        .await?;
    Ok(UploadOutcome::Sent { from })
}

/// A run's log, as it arrives. Implementations resume across dropped connections, so each
/// byte is yielded exactly once, in order.
#[async_trait]
pub trait LogStream: Send {
    /// The next event, or `None` after [`LogEvent::End`] or [`LogEvent::Tail`].
    async fn next(&mut self) -> Option<Result<LogEvent, ApiError>>;
}

/// A run's result with its object's JSON text: [`ControlPlane::result_exact`].
#[derive(Debug, Clone)]
pub struct ExactResult {
    /// The result as [`ControlPlane::result`] reads it.
    pub result: RunResult,
    /// The object's JSON text, numbers as written; absent when `result.result` is.
    pub text: Option<Box<serde_json::value::RawValue>>,
}

/// A sink for downloaded bytes.
pub type ByteSink<'a> = &'a mut (dyn tokio::io::AsyncWrite + Unpin + Send);

/// One method per control-plane operation. Usable as `Box<dyn ControlPlane>`.
#[async_trait]
pub trait ControlPlane: Send + Sync {
    /// The catalogue: SKUs, prices, limits.
    async fn catalogue(&self) -> Result<Catalogue, ApiError>;

    /// Pulls `image` into the control plane's image cache before a run names it, telling
    /// `progress` each [`PullEvent`] as it comes; an image that cannot be used is an error
    /// (`Refused`, the registry's answer in its message). A control plane without images
    /// (no such route) pulls nothing, as does this default.
    async fn pull_image(
        &self,
        image: &str,
        progress: &(dyn for<'e> Fn(&'e PullEvent) + Send + Sync),
    ) -> Result<(), ApiError> {
        let request = PullImage {
            image: image.to_owned(),
            pull: None,
        };
        self.pull_image_with(&request, progress).await
    }

    /// [`pull_image`](ControlPlane::pull_image) with everything `POST /v1/images/pull`
    /// takes: when to ask the registry (`request.pull`). A control plane without images
    /// pulls nothing, as does this default.
    async fn pull_image_with(
        &self,
        request: &PullImage,
        progress: &(dyn for<'e> Fn(&'e PullEvent) + Send + Sync),
    ) -> Result<(), ApiError> {
        let _ = (request, progress);
        Ok(())
    }

    /// The control plane's image cache: every image pulled, and the disk they take. A control
    /// plane without one (this default; over HTTP, one that answers the route 404) is
    /// `NotFound`.
    async fn list_images(&self) -> Result<ImageCache, ApiError> {
        Err(no_image_cache())
    }

    /// Removes every cached image no queued or running run uses, and the blobs only they
    /// needed; waits for pulls under way. `NotFound` as [`ControlPlane::list_images`].
    async fn prune_images(&self, prune: &PruneImages) -> Result<PrunedImages, ApiError> {
        let _ = prune;
        Err(no_image_cache())
    }

    /// Every volume.
    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError>;
    /// Make a volume; making one that exists returns it (idempotent).
    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError>;
    /// Remove a volume and everything in it.
    async fn delete_volume(&self, name: &str) -> Result<(), ApiError>;
    /// Which of `hashes` the volume lacks, with partial uploads' sizes.
    async fn missing_blobs(
        &self,
        volume: &str,
        hashes: &[String],
    ) -> Result<MissingBlobs, ApiError>;
    /// Send a blob's bytes from `offset` (0, or what [`MissingBlobs::partial`] said had
    /// arrived). The server verifies the hash once the blob is whole.
    async fn upload_blob(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError>;
    /// Send several small whole blobs in one request (`POST /v1/volumes/{name}/blobs/pack`,
    /// framed by [`pack_frame`]): what keeps a project of many small files from costing a
    /// request each. The server verifies each blob's hash. A control plane without this
    /// route (the default here) gets each blob by [`ControlPlane::upload_blob`].
    async fn upload_pack(&self, volume: &str, blobs: &[PackBlob]) -> Result<(), ApiError> {
        upload_one_by_one(self, volume, blobs).await
    }
    /// Stage `tree` (at a path that is not the volume's root) to be written as its blobs
    /// arrive ([`StagedTree`]); `None` when this control plane stages no trees (the default
    /// here): the caller then asks [`ControlPlane::missing_blobs`], sends them, and commits
    /// the tree with [`ControlPlane::commit_tree`].
    async fn stage_tree(
        &self,
        _volume: &str,
        _tree: &CommitTree,
    ) -> Result<Option<StagedTree>, ApiError> {
        Ok(None)
    }
    /// [`ControlPlane::upload_pack`], for the staged tree `stage`: the server writes each
    /// blob straight into its places in the tree. The default sends an ordinary pack, which
    /// the stage's commit links in as it does every blob the volume holds.
    async fn upload_staged_pack(
        &self,
        volume: &str,
        _stage: &str,
        blobs: &[PackBlob],
    ) -> Result<(), ApiError> {
        self.upload_pack(volume, blobs).await
    }
    /// Commit the staged tree `stage`, once every blob it lacked was sent: the same answer
    /// as [`ControlPlane::commit_tree`]'s, and the same refusal when blobs are missing
    /// (`details.missing`), after which the stage is gone.
    async fn commit_stage(&self, _volume: &str, stage: &str) -> Result<CommittedTree, ApiError> {
        Err(ApiError::new(
            ErrorKind::NotFound,
            format!("this control plane stages no trees (no stage `{stage}`)"),
        ))
    }
    /// Commit a tree of sent blobs at a path in the volume.
    async fn commit_tree(&self, volume: &str, tree: &CommitTree)
    -> Result<CommittedTree, ApiError>;
    /// The tree the volume holds at `path`, when it is the one with `digest`
    /// ([`tree_digest`]); `None` when it holds none there, another one, or cannot say (a
    /// control plane without this question answers it `None`: the caller then sends the
    /// tree the whole way).
    async fn tree_held(
        &self,
        _volume: &str,
        _path: &str,
        _digest: &str,
    ) -> Result<Option<CommittedTree>, ApiError> {
        Ok(None)
    }
    /// List what is under `path` in the volume (recursively), `""` for all of it.
    async fn list_tree(&self, volume: &str, path: &str) -> Result<Vec<VolumeEntry>, ApiError>;
    /// Write the file at `path` in the volume into `sink`; returns the bytes written.
    async fn read_file(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError>;

    /// Whether `run` would be placed, creating nothing (`POST /v1/runs/validate`): `Ok` when
    /// [`ControlPlane::create_run`] would take it now, and otherwise the very error it would
    /// answer. `run.code` may be absent (its code is not sent yet): everything else is
    /// checked, the refusals only the control plane can make among them (what its executor
    /// can never place). Its image is not resolved: [`ControlPlane::pull_image`] does that. A
    /// control plane without the question (this default; over HTTP, one that answers the
    /// route 404 or 405) takes everything here, and refuses at `create_run` instead.
    async fn validate_run(&self, run: &CreateRun) -> Result<(), ApiError> {
        let _ = run;
        Ok(())
    }
    /// Place a run. Retrying with the same `idempotency_key` never places a second one.
    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError>;
    /// A run by id or name.
    async fn get_run(&self, run: &str) -> Result<Run, ApiError>;
    /// Runs, newest first.
    async fn list_runs(&self, query: &ListRuns) -> Result<RunList, ApiError>;
    /// Stop a run (it ends `canceled`); stopping an ended run returns it unchanged.
    async fn stop_run(&self, run: &str) -> Result<Run, ApiError>;
    /// The run's log from `offset`; with `follow`, until the run ends.
    async fn log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError>;
    /// The log of node `node` (its rank, 0…) of a run placed on several nodes, from
    /// `offset`; with `follow`, until the run ends. Node 0's is the run's log. A run that
    /// has no such node is refused (`not_found`); a server from before nodes' logs answers
    /// with the run's log.
    async fn node_log(
        &self,
        run: &str,
        node: u32,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError>;
    /// The run's result and verdicts.
    async fn result(&self, run: &str) -> Result<RunResult, ApiError>;
    /// [`ControlPlane::result`], with the result object's JSON text as the control plane
    /// sent it: its numbers as the run wrote them (`0.30000000000000001`), which `result`'s
    /// `Value` holds only as far as an `f64` can. Checks judged on this machine judge the
    /// text. By default the text is `result` written out again (exact as far as it goes).
    async fn result_exact(&self, run: &str) -> Result<ExactResult, ApiError> {
        let result = self.result(run).await?;
        let text = result
            .result
            .as_ref()
            .and_then(|v| serde_json::value::to_raw_value(v).ok());
        Ok(ExactResult { result, text })
    }
    /// The run's telemetry points after line `after` (0 for all).
    async fn telemetry(&self, run: &str, after: u64) -> Result<Telemetry, ApiError>;

    /// Set a secret; every run gets it as an environment variable.
    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError>;
    /// Secrets' names, never their values.
    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError>;
    /// Remove a secret.
    async fn delete_secret(&self, name: &str) -> Result<(), ApiError>;

    /// Every model, with its latest version. A control plane without models (this default;
    /// over HTTP, one that answers the route 404) is `NotFound`.
    async fn list_models(&self) -> Result<ModelList, ApiError> {
        Err(no_models())
    }
    /// A model's versions and their evaluations.
    async fn get_model(&self, name: &str) -> Result<Model, ApiError> {
        let _ = name;
        Err(no_models())
    }
    /// `name`'s next version from what `volume` holds at `path` (a tree committed there, or
    /// a folder or file copied); the latest itself when it is the same tree.
    async fn push_model(&self, name: &str, push: &PushModel) -> Result<ModelVersion, ApiError> {
        let _ = (name, push);
        Err(no_models())
    }
    /// Removes a model's `version`, or every version (`None`).
    async fn delete_model(&self, name: &str, version: Option<u32>) -> Result<(), ApiError> {
        let _ = (name, version);
        Err(no_models())
    }
    /// Evaluations, newest first: of `model` (`NAME`, `NAME:vN`, `NAME@sha256:…`) where given.
    async fn list_evaluations(&self, model: Option<&str>) -> Result<EvaluationList, ApiError> {
        let _ = model;
        Err(no_models())
    }
    /// An evaluation by its id.
    async fn get_evaluation(&self, id: &str) -> Result<Evaluation, ApiError> {
        let _ = id;
        Err(no_models())
    }
    /// The org's side of the control plane (members, their tokens and limits, the audit
    /// log), where it has one; `None`, as this default answers, where it has no members.
    fn team(&self) -> Option<&dyn Team> {
        None
    }
}
