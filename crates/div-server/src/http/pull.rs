//! `POST /v1/images/pull`: an image pulled (or found in the cache) with its progress
//! streamed to the client, one JSON object a line.

use super::error::HttpError;

/// `POST /v1/images/pull`'s body, `application/x-ndjson`: one JSON object a line, in order:
/// `{"event":"resolved","layers":N,"bytes":B}`, `{"event":"progress","done":D,"total":B}`
/// (bytes verified, all layers together; some may be left out when the client reads slowly),
/// `{"event":"unpacking","layer":I,"layers":N}`, then the last line:
/// `{"event":"ready","image":REF,"digest":D}`, `{"event":"host","image":REF}` (this machine's
/// system stands in for the default image: nothing pulled), or
/// `{"event":"error","error":{"code","message"}}` with the error `POST /v1/runs` would give.
pub(crate) async fn pull_stream(
    images: &crate::images::Images,
    image: Option<String>,
    pull: Option<div_api::PullPolicy>,
    tx: tokio::sync::mpsc::Sender<bytes::Bytes>,
) {
    let line = |v: serde_json::Value| {
        let mut b = serde_json::to_vec(&v).unwrap_or_default();
        b.push(b'\n');
        bytes::Bytes::from(b)
    };
    let state = std::sync::Mutex::new(std::collections::BTreeMap::<usize, u64>::new());
    let total = std::sync::atomic::AtomicU64::new(0);
    let sink = |event: &div_image::Progress| {
        use div_image::Progress as P;
        let v = match event {
            P::Resolved { layers, bytes, .. } => {
                total.store(*bytes, std::sync::atomic::Ordering::Relaxed);
                serde_json::json!({"event": "resolved", "layers": layers, "bytes": bytes})
            }
            P::Bytes { index, done, .. } => {
                let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                s.insert(*index, *done);
                let done: u64 = s.values().sum();
                serde_json::json!({"event": "progress", "done": done,
                    "total": total.load(std::sync::atomic::Ordering::Relaxed)})
            }
            P::Unpacking { index, layers } => {
                serde_json::json!({"event": "unpacking", "layer": index + 1, "layers": layers})
            }
            _ => return,
        };
        // Progress is best effort: a line the client is too slow for is dropped.
        let _ = tx.try_send(line(v));
    };
    let last = match images.resolve(image.as_deref(), pull, &sink).await {
        Ok(Some(run_image)) => {
            use div_image::ImageSource as S;
            let (source, resolved_at) = match run_image.source {
                Some(S::Pulled) => ("pulled", None),
                Some(S::Checked) => ("checked", None),
                Some(S::Cached { resolved_at }) => {
                    ("cached", resolved_at.map(crate::images::rfc3339))
                }
                None => ("cached", None),
            };
            let mut v = serde_json::json!({"event": "ready",
                "image": run_image.reference, "digest": run_image.digest, "source": source});
            if let Some(at) = resolved_at {
                v["resolved_at"] = serde_json::Value::String(at);
            }
            v
        }
        Ok(None) => serde_json::json!({"event": "host",
            "image": image.as_deref().unwrap_or(div_spec::DEFAULT_IMAGE)}),
        Err(e) => {
            let e = HttpError::from(e);
            if e.details.is_null() {
                serde_json::json!({"event": "error",
                    "error": {"code": e.code.as_str(), "message": e.message}})
            } else {
                serde_json::json!({"event": "error",
                    "error": {"code": e.code.as_str(), "message": e.message, "details": e.details}})
            }
        }
    };
    let _ = tx.send(line(last)).await;
}
