//! [`FakeControlPlane`]: an in-memory [`ControlPlane`], no HTTP, that passes the
//! conformance suite. Runs do not execute: they stay `queued` until stopped or finished
//! with [`FakeControlPlane::finish_run`]; a followed log waits for that, as the server's does.
//!
//! By subject, each answering its routes from the state every part shares (`state.rs`):
//! `volumes.rs` (volumes, blobs, trees, files), `runs.rs` (runs, logs, results, telemetry),
//! `secrets.rs`, `images.rs`, `models.rs`; here, the [`ControlPlane`] impl, one line a route.

mod images;
mod models;
mod runs;
mod secrets;
pub(crate) mod state;
mod volumes;

use async_trait::async_trait;
use div_api::{
    ApiError, BlobSource, ByteSink, Catalogue, CommitTree, CommittedTree, ControlPlane, CreateRun,
    ImageCache, ListRuns, LogStream, MissingBlobs, PruneImages, PrunedImages, Run, RunList,
    RunResult, SecretInfo, StagedTree, Telemetry, Volume, VolumeEntry,
};
use div_api::{Evaluation, EvaluationList, Model, ModelList, ModelVersion, PushModel};

use self::state::FakeControlPlane;

#[async_trait]
impl ControlPlane for FakeControlPlane {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        runs::catalogue(self).await
    }

    async fn list_images(&self) -> Result<ImageCache, ApiError> {
        images::list_images(self).await
    }

    async fn list_models(&self) -> Result<ModelList, ApiError> {
        models::list_models(self).await
    }

    async fn get_model(&self, name: &str) -> Result<Model, ApiError> {
        models::get_model(self, name).await
    }

    async fn push_model(&self, name: &str, push: &PushModel) -> Result<ModelVersion, ApiError> {
        models::push_model(self, name, push).await
    }

    async fn delete_model(&self, name: &str, version: Option<u32>) -> Result<(), ApiError> {
        models::delete_model(self, name, version).await
    }

    async fn list_evaluations(&self, model: Option<&str>) -> Result<EvaluationList, ApiError> {
        models::list_evaluations(self, model).await
    }

    async fn get_evaluation(&self, id: &str) -> Result<Evaluation, ApiError> {
        models::get_evaluation(self, id).await
    }

    async fn prune_images(&self, prune: &PruneImages) -> Result<PrunedImages, ApiError> {
        images::prune_images(self, prune).await
    }

    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        volumes::list_volumes(self).await
    }

    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError> {
        volumes::create_volume(self, name).await
    }

    async fn delete_volume(&self, name: &str) -> Result<(), ApiError> {
        volumes::delete_volume(self, name).await
    }

    async fn missing_blobs(
        &self,
        volume: &str,
        hashes: &[String],
    ) -> Result<MissingBlobs, ApiError> {
        volumes::missing_blobs(self, volume, hashes).await
    }

    async fn upload_blob(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        volumes::upload_blob(self, volume, hash, offset, total, data).await
    }

    async fn stage_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<Option<StagedTree>, ApiError> {
        volumes::stage_tree(self, volume, tree).await
    }

    async fn upload_staged_pack(
        &self,
        volume: &str,
        stage: &str,
        blobs: &[div_api::PackBlob],
    ) -> Result<(), ApiError> {
        volumes::upload_staged_pack(self, volume, stage, blobs).await
    }

    async fn commit_stage(&self, volume: &str, stage: &str) -> Result<CommittedTree, ApiError> {
        volumes::commit_stage(self, volume, stage).await
    }

    async fn commit_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<CommittedTree, ApiError> {
        volumes::commit_tree(self, volume, tree).await
    }

    async fn list_tree(&self, volume: &str, path: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        volumes::list_tree(self, volume, path).await
    }

    async fn read_file(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        volumes::read_file(self, volume, path, sink).await
    }

    async fn validate_run(&self, run: &CreateRun) -> Result<(), ApiError> {
        runs::validate_run(self, run).await
    }

    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError> {
        runs::create_run(self, idempotency_key, run).await
    }

    async fn get_run(&self, run: &str) -> Result<Run, ApiError> {
        runs::get_run(self, run).await
    }

    async fn list_runs(&self, query: &ListRuns) -> Result<RunList, ApiError> {
        runs::list_runs(self, query).await
    }

    async fn stop_run(&self, run: &str) -> Result<Run, ApiError> {
        runs::stop_run(self, run).await
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
        runs::node_log(self, run, node, _offset, _follow).await
    }

    async fn log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        runs::log(self, run, offset, follow).await
    }

    async fn result(&self, run: &str) -> Result<RunResult, ApiError> {
        runs::result(self, run).await
    }

    async fn telemetry(&self, run: &str, after: u64) -> Result<Telemetry, ApiError> {
        runs::telemetry(self, run, after).await
    }

    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError> {
        secrets::set_secret(self, name, value).await
    }

    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        secrets::list_secrets(self).await
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ApiError> {
        secrets::delete_secret(self, name).await
    }
}
