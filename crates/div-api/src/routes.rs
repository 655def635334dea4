//! The routes of the contract: one method of [`ControlPlane`] per route, each a JSON
//! request through the client's retrying `send` (`client.rs`), and the percent-encoding of
//! the path segments and query values they carry.

use async_trait::async_trait;
use http::Method;
use http::header::HeaderValue;
use serde_json::Value;

use crate::client::{Call, HttpControlPlane};
use crate::error::{ApiError, ErrorKind};
use crate::models::*;
use crate::{BlobSource, ByteSink, ControlPlane, ExactResult, LogStream, PackBlob};

/// Every route the client calls, as `(method, path template)`; the OpenAPI document declares
/// exactly these (a test checks it).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/v1/health"),
    ("GET", "/v1/catalogue"),
    ("GET", "/v1/volumes"),
    ("POST", "/v1/volumes"),
    ("DELETE", "/v1/volumes/{name}"),
    ("POST", "/v1/volumes/{name}/blobs/missing"),
    ("PUT", "/v1/volumes/{name}/blobs/{hash}"),
    ("POST", "/v1/volumes/{name}/blobs/pack"),
    ("POST", "/v1/volumes/{name}/trees"),
    ("POST", "/v1/volumes/{name}/stages"),
    ("POST", "/v1/volumes/{name}/stages/{stage}/commit"),
    ("GET", "/v1/volumes/{name}/trees"),
    ("GET", "/v1/volumes/{name}/tree"),
    ("GET", "/v1/volumes/{name}/file"),
    ("POST", "/v1/images/pull"),
    ("POST", "/v1/runs/validate"),
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/{run}"),
    ("POST", "/v1/runs/{run}/stop"),
    ("GET", "/v1/runs/{run}/log"),
    ("GET", "/v1/runs/{run}/result"),
    ("GET", "/v1/runs/{run}/telemetry"),
    ("GET", "/v1/secrets"),
    ("PUT", "/v1/secrets/{name}"),
    ("DELETE", "/v1/secrets/{name}"),
];

/// The header carrying a run creation's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

#[async_trait]
impl ControlPlane for HttpControlPlane {
    async fn catalogue(&self) -> Result<Catalogue, ApiError> {
        self.json(Call::get("/v1/catalogue".to_owned())).await
    }

    async fn pull_image(
        &self,
        image: &str,
        progress: &(dyn for<'e> Fn(&'e PullEvent) + Send + Sync),
    ) -> Result<(), ApiError> {
        use http_body_util::BodyExt;
        let call = Call::with_json(
            Method::POST,
            "/v1/images/pull".to_owned(),
            &serde_json::json!({ "image": image }),
        );
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
                            Value::Null,
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

    async fn list_volumes(&self) -> Result<Vec<Volume>, ApiError> {
        #[derive(serde::Deserialize)]
        struct List {
            volumes: Vec<Volume>,
        }
        let list: List = self.json(Call::get("/v1/volumes".to_owned())).await?;
        Ok(list.volumes)
    }

    async fn create_volume(&self, name: &str) -> Result<Volume, ApiError> {
        let body = CreateVolume {
            name: name.to_owned(),
        };
        self.json(Call::with_json(
            Method::POST,
            "/v1/volumes".to_owned(),
            &body,
        ))
        .await
    }

    async fn delete_volume(&self, name: &str) -> Result<(), ApiError> {
        self.empty(Call::delete(format!("/v1/volumes/{}", segment(name))))
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
        self.json(Call::with_json(
            Method::POST,
            format!("/v1/volumes/{}/blobs/missing", segment(volume)),
            &body,
        ))
        .await
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
            method: Method::POST,
            body: crate::client::CallBody::Bytes(bytes::Bytes::from(crate::pack_frame(blobs))),
            ..Call::get(format!("/v1/volumes/{}/blobs/pack", segment(volume)))
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
        self.json(Call::with_json(
            Method::POST,
            format!("/v1/volumes/{}/trees", segment(volume)),
            tree,
        ))
        .await
    }

    async fn stage_tree(
        &self,
        volume: &str,
        tree: &CommitTree,
    ) -> Result<Option<StagedTree>, ApiError> {
        let got = self
            .json(Call::with_json(
                Method::POST,
                format!("/v1/volumes/{}/stages", segment(volume)),
                tree,
            ))
            .await;
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
        let call = Call {
            method: Method::POST,
            body: crate::client::CallBody::Bytes(bytes::Bytes::from(crate::pack_frame(blobs))),
            ..Call::get(format!(
                "/v1/volumes/{}/blobs/pack?stage={}",
                segment(volume),
                query_value(stage)
            ))
        };
        self.json::<Value>(call).await.map(drop)
    }

    async fn commit_stage(&self, volume: &str, stage: &str) -> Result<CommittedTree, ApiError> {
        self.json(Call::with_json(
            Method::POST,
            format!(
                "/v1/volumes/{}/stages/{}/commit",
                segment(volume),
                segment(stage)
            ),
            &serde_json::json!({}),
        ))
        .await
    }

    async fn tree_held(
        &self,
        volume: &str,
        path: &str,
        digest: &str,
    ) -> Result<Option<CommittedTree>, ApiError> {
        let got: Result<CommittedTree, ApiError> = self
            .json(Call::get(format!(
                "/v1/volumes/{}/trees?path={}&digest={}",
                segment(volume),
                query_value(path),
                query_value(digest)
            )))
            .await;
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
        #[derive(serde::Deserialize)]
        struct List {
            entries: Vec<VolumeEntry>,
        }
        let list: List = self
            .json(Call::get(format!(
                "/v1/volumes/{}/tree?path={}",
                segment(volume),
                query_value(path)
            )))
            .await?;
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
        let call = Call::with_json(Method::POST, "/v1/runs/validate".to_owned(), run);
        match self.json::<Value>(call).await {
            Ok(_) => Ok(()),
            // A control plane without the question (404, or 405 for the method): it refuses
            // at `POST /v1/runs` what it refuses.
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn create_run(&self, idempotency_key: &str, run: &CreateRun) -> Result<Run, ApiError> {
        let mut call = Call::with_json(Method::POST, "/v1/runs".to_owned(), run);
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
        self.run_json(Call::get(format!("/v1/runs/{}", segment(run))))
            .await
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
        let path = if params.is_empty() {
            "/v1/runs".to_owned()
        } else {
            format!("/v1/runs?{}", params.join("&"))
        };
        let raw: Value = self.json(Call::get(path)).await?;
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
        self.run_json(Call {
            method: Method::POST,
            ..Call::get(format!("/v1/runs/{}/stop", segment(run)))
        })
        .await
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
        self.json(Call::get(format!("/v1/runs/{}/result", segment(run))))
            .await
    }

    async fn result_exact(&self, run: &str) -> Result<ExactResult, ApiError> {
        /// The `result` field alone, as its text: a struct without `flatten`, which a
        /// `RawValue` cannot pass through.
        #[derive(serde::Deserialize)]
        struct Text {
            #[serde(default)]
            result: Option<Box<serde_json::value::RawValue>>,
        }
        let body: Box<serde_json::value::RawValue> = self
            .json(Call::get(format!("/v1/runs/{}/result", segment(run))))
            .await?;
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
        self.json(Call::get(format!(
            "/v1/runs/{}/telemetry?after={after}",
            segment(run)
        )))
        .await
    }

    async fn set_secret(&self, name: &str, value: &str) -> Result<SecretInfo, ApiError> {
        let body = SetSecret {
            value: value.to_owned(),
        };
        self.json(Call::with_json(
            Method::PUT,
            format!("/v1/secrets/{}", segment(name)),
            &body,
        ))
        .await
    }

    async fn list_secrets(&self) -> Result<Vec<SecretInfo>, ApiError> {
        #[derive(serde::Deserialize)]
        struct List {
            secrets: Vec<SecretInfo>,
        }
        let list: List = self.json(Call::get("/v1/secrets".to_owned())).await?;
        Ok(list.secrets)
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ApiError> {
        self.empty(Call::delete(format!("/v1/secrets/{}", segment(name))))
            .await
            .map(drop)
    }
}

/// Percent-encode a path segment: everything but unreserved characters.
pub(crate) fn segment(text: &str) -> String {
    encode(text, b"-._~")
}

/// Percent-encode a query value, keeping `/` readable.
pub(crate) fn query_value(text: &str) -> String {
    encode(text, b"-._~/")
}

fn encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_segments_and_queries() {
        assert_eq!(segment("run-k4t9"), "run-k4t9");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(query_value("code/x y"), "code/x%20y");
        assert_eq!(query_value("a&b=c"), "a%26b%3Dc");
    }
}
