//! How a check says it failed: [`CheckFailure`], and the helpers every check uses.

use bytes::Bytes;
use div_api::{ApiError, BlobSource, ControlPlane, EntryKind, ErrorKind, TreeEntry};

/// Why a check failed: what it did, and what came back instead of what it expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CheckFailure(String);

impl std::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailure {}

impl From<String> for CheckFailure {
    fn from(why: String) -> CheckFailure {
        CheckFailure(why)
    }
}

impl From<&str> for CheckFailure {
    fn from(why: &str) -> CheckFailure {
        CheckFailure(why.to_owned())
    }
}

/// What a check answers.
pub(crate) type CheckResult = Result<(), CheckFailure>;

macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err($crate::conformance::check::CheckFailure::from(format!($($why)+)));
        }
    };
}
pub(crate) use ensure;

/// Turn an unexpected API error into a check failure.
pub(crate) fn api(what: &str) -> impl Fn(ApiError) -> CheckFailure + '_ {
    move |e| CheckFailure(format!("{what}: {:?}: {}", e.kind(), e.message()))
}

/// Check that `result` failed with `kind` (and `code`, when given).
pub(crate) fn expect_error<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, ApiError>,
    kind: ErrorKind,
    code: Option<&str>,
) -> Result<ApiError, CheckFailure> {
    match result {
        Ok(v) => Err(CheckFailure(format!(
            "{what}: expected a {kind:?} error, got {v:?}"
        ))),
        Err(e) if e.kind() != kind => Err(CheckFailure(format!(
            "{what}: expected a {kind:?} error, got {:?}: {}",
            e.kind(),
            e.message()
        ))),
        Err(e) if code.is_some() && e.code() != code => Err(CheckFailure(format!(
            "{what}: expected code {code:?}, got {:?}: {}",
            e.code(),
            e.message()
        ))),
        Err(e) => Ok(e),
    }
}

/// A blob's name: its blake3, lowercase hex.
pub(crate) fn hash(data: &[u8]) -> String {
    blake3::hash(data).to_hex().to_string()
}

/// Each of `files` uploaded whole to `volume`, as the blob named by its hash.
pub(crate) async fn upload_whole(
    cp: &dyn ControlPlane,
    volume: &str,
    files: &[&Bytes],
) -> CheckResult {
    for data in files {
        cp.upload_blob(
            volume,
            &hash(data),
            0,
            data.len() as u64,
            BlobSource::Bytes((*data).clone()),
        )
        .await
        .map_err(api("upload_blob"))?;
    }
    Ok(())
}

/// A file of a tree to commit: `data` at `path`, by its hash.
pub(crate) fn file_entry(path: &str, data: &Bytes, executable: bool) -> TreeEntry {
    TreeEntry {
        path: path.to_owned(),
        kind: EntryKind::File,
        executable,
        size: data.len() as u64,
        hash: Some(hash(data)),
        target: None,
    }
}
