//! The log stream's frames (see `div_api`'s crate docs).
//!
//! INTERIM: to be replaced by `div_api::logframe` once it is exported.

use bytes::Bytes;
use div_api::Run;

pub(crate) const MEDIA_TYPE: &str = "application/vnd.div.log";
pub(crate) const BEAT: &[u8] = b"beat\n";

pub(crate) fn encode_chunk(offset: u64, data: &[u8]) -> Bytes {
    let mut out = format!("chunk {offset} {}\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    Bytes::from(out)
}

pub(crate) fn encode_end(run: &Run) -> Bytes {
    let json = serde_json::to_vec(run).unwrap_or_default();
    let mut out = format!("end {}\n", json.len()).into_bytes();
    out.extend_from_slice(&json);
    Bytes::from(out)
}

pub(crate) fn encode_tail(offset: u64) -> Bytes {
    Bytes::from(format!("tail {offset}\n"))
}
