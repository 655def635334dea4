//! [`ControlPlane`] for [`HttpControlPlane`]: each operation one request of its route
//! ([`crate::routes`]), through the client's retrying `send` (`client.rs`); the three that
//! resume across dropped connections hand over to `upload.rs`, `read_file.rs` and
//! `log_stream.rs`.

use async_trait::async_trait;
use http::header::HeaderValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::client::{Call, CallBody, HttpControlPlane};
use crate::error::{ApiError, ErrorKind};
use crate::models::*;
use crate::routes::{self, Nothing, TypedRoute, query_value};
use crate::{BlobSource, ByteSink, ControlPlane, ExactResult, LogStream, PackBlob, Team};

impl HttpControlPlane {
    /// `route`'s JSON answer to a request without a body, at `path` (the route's, filled
    /// in, with its query).
    pub(crate) async fn ask<Resp: DeserializeOwned>(
        &self,
        route: &TypedRoute<Nothing, Resp>,
        path: String,
    ) -> Result<Resp, ApiError> {
        self.json(Call::new(route.route, path)).await
    }

    /// `route`'s JSON answer to `body`, at `path`.
    pub(crate) async fn tell<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        route: &TypedRoute<Req, Resp>,
        path: String,
        body: &Req,
    ) -> Result<Resp, ApiError> {
        self.json(Call::with_json(route.route, path, body)).await
    }
}

#[async_trait]
impl ControlPlane for HttpControlPlane {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.ask(&routes::CATALOGUE, routes::CATALOGUE.path(&[]))
            .await
    }

    async fn pull_image_with(
        &self,
        body: &PullImage,
        progress: &(dyn for<'e> Fn(&'e PullEvent) + Send + Sync),
    ) -> Result<(), ApiError> {
        use http_body_util::BodyExt;
        let image = body.image.as_str();
        let call = Call::with_json(routes::Route::PullImage, routes::PULL_IMAGE.path(&[]), body);
        let resp = match self.stream(call, self.deadline()).await {
            // A control plane without images.
            Err(e) if e.is_not_found() => return Ok(()),
            other => other?,
        };
        let broke = |e: String| {
            ApiError::new(
                ErrorKind::Unavailable,
                format!("the pull of `{image}` broke off: {e}"),
            )
        };
        let mut body = resp.into_body();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| broke(e.to_string()))?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            buf.extend_from_slice(data);
            while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let event: PullEvent = serde_json::from_slice(&line).map_err(|e| {
                    ApiError::new(
                        ErrorKind::Protocol,
                        format!(
                            "the pull of `{image}` answered a line this client cannot read: {e}"
                        ),
                    )
                })?;
                match event {
                    PullEvent::Error { error } => {
                        return Err(ApiError::from_server(
                            ErrorKind::Refused,
                            error.code,
                            error.message,
                            error.details,
                        ));
                    }
                    PullEvent::Ready { .. } | PullEvent::Host { .. } => {
                        progress(&event);
                        return Ok(());
                    }
                    other => progress(&other),
                }
            }
        }
        Err(broke("it ended before its last line".to_owned()))
    }

    async fn list_images(&self) -> Result<ImageCache, ApiError> {
        self.ask(&routes::LIST_IMAGES, routes::LIST_IMAGES.path(&[]))
            .await
    }

    async fn prune_images(&self, prune: &PruneImages) -> Result<PrunedImages, ApiError> {
        let path = routes::PRUNE_IMAGES.path(&[]);
        self.tell(&routes::PRUNE_IMAGES, path, prune).await
    }

    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        let list = self
            .ask(&routes::LIST_VOLUMES, routes::LIST_VOLUMES.path(&[]))
            .await?;
        Ok(list.volumes)
    }

    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError> {
        let body = CreateVolume {
            name: name.to_owned(),
        };
        self.tell(
            &routes::CREATE_VOLUME,
            routes::CREATE_VOLUME.path(&[]),
            &body,
        )
        .await
    }

    async fn delete_volume(&self, name: &str) -> Result<(), ApiError> {
        let path = routes::DELETE_VOLUME.path(&[name]);
        self.empty(Call::new(routes::Route::DeleteVolume, path))
            .await
            .map(drop)
    }

    async fn missing_blobs(
        &self,
        volume: &str,
        hashes: &[String],
    ) -> Result<MissingBlobs, ApiError> {
        let body = MissingBlobsRequest {
            hashes: hashes.to_vec(),
        };
        let path = routes::MISSING_BLOBS.path(&[volume]);
        self.tell(&routes::MISSING_BLOBS, path, &body).await
    }

    async fn upload_blob(
        &self,
        volume: &str,
        hash: &str,
        offset: u64,
        total: u64,
        data: BlobSource,
    ) -> Result<(), ApiError> {
        self.upload_resuming(volume, hash, offset, total, data)
            .await
    }

    async fn upload_pack(&self, volume: &str, blobs: &[PackBlob]) -> Result<(), ApiError> {
        let call = Call {
            body: CallBody::Bytes(bytes::Bytes::from(crate::pack_frame(blobs))),
            ..Call::new(
                routes::Route::UploadPack,
                routes::UPLOAD_PACK.path(&[volume]),
            )
        };
        match self.json::<Value>(call).await {
            Ok(_) => Ok(()),
            // A control plane without packs (the route is unknown to it): one blob at a time.
            // (A volume that is not there fails again there, and says so.)
            Err(e) if e.is_not_found() => crate::upload_one_by_one(self, volume, blobs).await,
            Err(e) => Err(e),
        }
    }

    async fn commit_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<CommittedTree, ApiError> {
        let path = routes::COMMIT_TREE.path(&[volume]);
        self.tell(&routes::COMMIT_TREE, path, tree).await
    }

    async fn stage_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<Option<StagedTree>, ApiError> {
        let path = routes::STAGE_TREE.path(&[volume]);
        let got = self.tell(&routes::STAGE_TREE, path, tree).await;
        match got {
            Ok(staged) => Ok(Some(staged)),
            // A control plane without stages (the route is unknown to it): the tree is sent
            // the other way. (A volume that is not there fails again there, and says so.)
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn upload_staged_pack(
        &self,
        volume: &str,
        stage: &str,
        blobs: &[PackBlob],
    ) -> Result<(), ApiError> {
        let path = format!(
            "{}?stage={}",
            routes::UPLOAD_PACK.path(&[volume]),
            query_value(stage)
        );
        let call = Call {
            body: CallBody::Bytes(bytes::Bytes::from(crate::pack_frame(blobs))),
            ..Call::new(routes::Route::UploadPack, path)
        };
        self.json::<Value>(call).await.map(drop)
    }

    async fn commit_stage(&self, volume: &str, stage: &str) -> Result<CommittedTree, ApiError> {
        let path = routes::COMMIT_STAGE.path(&[volume, stage]);
        // An empty object, as the first servers asked for one.
        let call = Call::with_json(routes::Route::CommitStage, path, &serde_json::json!({}));
        self.json(call).await
    }

    async fn tree_held(
        &self,
        volume: &str,
        path: &str,
        digest: &str,
    ) -> Result<Option<CommittedTree>, ApiError> {
        let at = format!(
            "{}?path={}&digest={}",
            routes::TREE_HELD.path(&[volume]),
            query_value(path),
            query_value(digest)
        );
        let got = self.ask(&routes::TREE_HELD, at).await;
        match got {
            // Only an answer that names this digest is taken: anything else (another tree,
            // a server that does not know the question) sends the tree the whole way.
            Ok(tree) if tree.digest.as_deref() == Some(digest) => Ok(Some(tree)),
            Ok(_) => Ok(None),
            // Not held there (404), or a control plane that does not know the question: the
            // upload's next request says what is wrong, if anything is.
            Err(_) => Ok(None),
        }
    }

    async fn list_tree(&self, volume: &str, path: &str) -> Result<Vec<VolumeEntry>, ApiError> {
        let at = format!(
            "{}?path={}",
            routes::LIST_TREE.path(&[volume]),
            query_value(path)
        );
        let list = self.ask(&routes::LIST_TREE, at).await?;
        Ok(list.entries)
    }

    async fn read_file(
        &self,
        volume: &str,
        path: &str,
        sink: ByteSink<'_>,
    ) -> Result<u64, ApiError> {
        self.read_file_resuming(volume, path, sink).await
    }

    async fn validate_run(&self, run: &CreateRun) -> Result<(), ApiError> {
        let call = Call::with_json(
            routes::Route::ValidateRun,
            routes::VALIDATE_RUN.path(&[]),
            run,
        );
        // Any JSON will do: only a refusal says more.
        match self.json::<Value>(call).await {
            Ok(_) => Ok(()),
            // A control plane without the question (404, or 405 for the method): it refuses
            // at `POST /v1/runs` what it refuses.
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError> {
        let mut call = Call::with_json(routes::Route::CreateRun, routes::CREATE_RUN.path(&[]), run);
        call.idempotency_key = Some(idempotency_key);
        if HeaderValue::from_str(idempotency_key).is_err() {
            return Err(ApiError::new(
                ErrorKind::Refused,
                format!("idempotency key `{idempotency_key}` is not a valid header value"),
            ));
        }
        self.run_json(call).await
    }

    async fn get_run(&self, run: &str) -> Result<Run, ApiError> {
        let path = routes::GET_RUN.path(&[run]);
        self.run_json(Call::new(routes::Route::GetRun, path)).await
    }

    async fn list_runs(&self, query: &ListRuns) -> Result<RunList, ApiError> {
        let mut params = Vec::new();
        if let Some(project) = &query.project {
            params.push(format!("project={}", query_value(project)));
        }
        if let Some(status) = query.status {
            params.push(format!("status={status}"));
        }
        if let Some(limit) = query.limit {
            params.push(format!("limit={limit}"));
        }
        if let Some(cursor) = &query.cursor {
            params.push(format!("cursor={}", query_value(cursor)));
        }
        if let Some(member) = &query.placed_by {
            params.push(format!("placed_by={}", query_value(member)));
        }
        let mut path = routes::LIST_RUNS.path(&[]);
        if !params.is_empty() {
            path = format!("{path}?{}", params.join("&"));
        }
        let raw: Value = self.json(Call::new(routes::Route::ListRuns, path)).await?;
        let mut list: RunList = serde_json::from_value(raw.clone()).map_err(|e| {
            ApiError::new(
                ErrorKind::Protocol,
                format!("could not read the control plane's list of runs: {e}"),
            )
        })?;
        if let Some(raws) = raw.get("runs").and_then(Value::as_array) {
            for (run, raw) in list.runs.iter_mut().zip(raws) {
                run.keep_nulls_from(raw);
            }
        }
        Ok(list)
    }

    async fn stop_run(&self, run: &str) -> Result<Run, ApiError> {
        let path = routes::STOP_RUN.path(&[run]);
        self.run_json(Call::new(routes::Route::StopRun, path)).await
    }

    async fn log(
        &self,
        run: &str,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        crate::log_stream::open(self, run, None, offset, follow).await
    }

    async fn node_log(
        &self,
        run: &str,
        node: u32,
        offset: u64,
        follow: bool,
    ) -> Result<Box<dyn LogStream>, ApiError> {
        crate::log_stream::open(self, run, Some(node), offset, follow).await
    }

    async fn result(&self, run: &str) -> Result<RunResult, ApiError> {
        self.ask(&routes::RESULT, routes::RESULT.path(&[run])).await
    }

    async fn result_exact(&self, run: &str) -> Result<ExactResult, ApiError> {
        /// The `result` field alone, as its text: a struct without `flatten`, which a
        /// `RawValue` cannot pass through.
        #[derive(serde::Deserialize)]
        struct Text {
            #[serde(default)]
            result: Option<Box<serde_json::value::RawValue>>,
        }
        let path = routes::RESULT.path(&[run]);
        let body: Box<serde_json::value::RawValue> =
            self.json(Call::new(routes::Route::Result, path)).await?;
        let unreadable = |e: serde_json::Error| {
            ApiError::new(
                ErrorKind::Protocol,
                format!("could not read the control plane's result of run `{run}`: {e}"),
            )
        };
        let result: RunResult = serde_json::from_str(body.get()).map_err(unreadable)?;
        let text = serde_json::from_str::<Text>(body.get())
            .map_err(unreadable)?
            .result
            .filter(|_| result.result.is_some());
        Ok(ExactResult { result, text })
    }

    async fn telemetry(&self, run: &str, after: u64) -> Result<Telemetry, ApiError> {
        let path = format!("{}?after={after}", routes::TELEMETRY.path(&[run]));
        self.ask(&routes::TELEMETRY, path).await
    }

    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError> {
        let body = SetSecret {
            value: value.to_owned(),
        };
        let path = routes::SET_SECRET.path(&[name]);
        self.tell(&routes::SET_SECRET, path, &body).await
    }

    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        let list = self
            .ask(&routes::LIST_SECRETS, routes::LIST_SECRETS.path(&[]))
            .await?;
        Ok(list.secrets)
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ApiError> {
        let path = routes::DELETE_SECRET.path(&[name]);
        self.empty(Call::new(routes::Route::DeleteSecret, path))
            .await
            .map(drop)
    }

    async fn list_models(&self) -> Result<ModelList, ApiError> {
        self.ask(&routes::LIST_MODELS, routes::LIST_MODELS.path(&[]))
            .await
    }

    async fn get_model(&self, name: &str) -> Result<Model, ApiError> {
        self.ask(&routes::GET_MODEL, routes::GET_MODEL.path(&[name]))
            .await
    }

    async fn push_model(&self, name: &str, push: &PushModel) -> Result<ModelVersion, ApiError> {
        let path = routes::PUSH_MODEL.path(&[name]);
        self.tell(&routes::PUSH_MODEL, path, push).await
    }

    async fn delete_model(&self, name: &str, version: Option<u32>) -> Result<(), ApiError> {
        let call = match version {
            Some(v) => Call::new(
                routes::Route::DeleteModelVersion,
                routes::DELETE_MODEL_VERSION.path(&[name, &format!("v{v}")]),
            ),
            None => Call::new(
                routes::Route::DeleteModel,
                routes::DELETE_MODEL.path(&[name]),
            ),
        };
        self.empty(call).await.map(drop)
    }

    async fn list_evaluations(&self, model: Option<&str>) -> Result<EvaluationList, ApiError> {
        let mut path = routes::LIST_EVALUATIONS.path(&[]);
        if let Some(model) = model {
            path.push_str(&format!("?model={}", query_value(model)));
        }
        self.ask(&routes::LIST_EVALUATIONS, path).await
    }

    async fn get_evaluation(&self, id: &str) -> Result<Evaluation, ApiError> {
        self.ask(&routes::GET_EVALUATION, routes::GET_EVALUATION.path(&[id]))
            .await
    }

    fn team(&self) -> Option<&dyn Team> {
        Some(self)
    }
}
