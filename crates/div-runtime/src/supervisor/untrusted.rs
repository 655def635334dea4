//! Reading back what a run left (its result, its telemetry, leftovers under `/mnt`) without
//! trusting any of it: links, FIFOs, folders, devices and sparse giants are all refused or
//! read in part, and nothing ever blocks.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use div_api::{BadLine, TelemetryPoint};
use serde_json::Value;

use super::spec::{
    KeptResult, KeptTelemetry, LEFTOVER_MAX_ENTRIES, RESULT_MAX_BYTES, TELEMETRY_MAX_BYTES,
    TELEMETRY_SHOWN,
};
use crate::{disk, rules, sys};

/// What came of opening a file the run left.
enum Untrusted {
    /// No such file.
    Missing,
    /// Something that is not a plain file, or too large: what was wrong, as a sentence.
    Refused(String),
    /// Its bytes (at most the limit), and whether more were left unread.
    Read(Vec<u8>, bool),
}

/// Reads a file the run left at `path` (`shown` is its path inside the run), trusting
/// nothing about it: `path`'s last `untrusted` components may be links, FIFOs, folders,
/// devices or sparse giants. No link is followed, a FIFO is never waited on, and at most
/// `max` bytes are read. A file over `max` is read in part when `partial`, else refused.
fn read_untrusted(
    path: &Path,
    untrusted: usize,
    shown: &str,
    max: u64,
    partial: bool,
) -> Untrusted {
    use std::io::Read;
    let parts: Vec<&std::ffi::OsStr> = path.iter().collect();
    let split = parts.len().saturating_sub(untrusted);
    let base: PathBuf = parts[..split].iter().collect();
    let rest: Vec<&str> = parts[split..].iter().filter_map(|p| p.to_str()).collect();
    let file = match sys::open_beneath(&base, &rest) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Untrusted::Missing,
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => {
                    "is (or lies under) a symbolic link, which is not followed".to_owned()
                }
                Some(libc::ENXIO) => "is a socket, not a file".to_owned(),
                _ => format!("could not be opened: {e}"),
            };
            return Untrusted::Refused(format!("{shown} {why}; it was not read"));
        }
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return Untrusted::Refused(format!("{shown} could not be read: {e}")),
    };
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_dir() {
            "a folder"
        } else if ft.is_char_device() || ft.is_block_device() {
            "a device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Untrusted::Refused(format!(
            "{shown} is {what}, not a regular file; it was not read"
        ));
    }
    if meta.len() > max && !partial {
        return Untrusted::Refused(format!(
            "{shown} is {}, over the {} it may be; it was not read",
            div_spec::format_bytes(meta.len()),
            div_spec::format_bytes(max)
        ));
    }
    let mut bytes = Vec::new();
    let mut reader = file.take(max.saturating_add(1));
    if let Err(e) = reader.read_to_end(&mut bytes) {
        return Untrusted::Refused(format!("{shown} could not be read: {e}"));
    }
    let more = bytes.len() as u64 > max;
    if more && !partial {
        return Untrusted::Refused(format!(
            "{shown} is over the {} it may be; it was not read",
            div_spec::format_bytes(max)
        ));
    }
    bytes.truncate(usize::try_from(max).unwrap_or(usize::MAX));
    Untrusted::Read(bytes, more)
}

/// The kept result, and what was wrong with the file when it was not a plain file of at
/// most [`RESULT_MAX_BYTES`].
pub(super) fn read_result(path: &Path) -> (KeptResult, Option<String>) {
    let bytes = match read_untrusted(
        path,
        2,
        "/tmp/divergent/result.json",
        RESULT_MAX_BYTES,
        false,
    ) {
        Untrusted::Missing => {
            return (
                KeptResult {
                    result: None,
                    problem: Some("the run wrote no result".to_owned()),
                    text: None,
                },
                None,
            );
        }
        Untrusted::Refused(why) => {
            return (
                KeptResult {
                    result: None,
                    problem: Some(why.clone()),
                    text: None,
                },
                Some(why),
            );
        }
        Untrusted::Read(bytes, _) => bytes,
    };
    let kept = match serde_json::from_slice::<Value>(&bytes) {
        // The text checks judge is this bounded read's, never the file read again.
        Ok(v @ Value::Object(_)) => KeptResult {
            result: Some(v),
            problem: None,
            text: String::from_utf8(bytes).ok(),
        },
        Ok(_) => KeptResult {
            result: None,
            problem: Some("the result is not a JSON object".to_owned()),
            text: None,
        },
        Err(e) => KeptResult {
            result: None,
            problem: Some(format!("the result is not JSON: {e}")),
            text: None,
        },
    };
    (kept, None)
}

/// The run's telemetry, read as [`read_untrusted`] reads (at most
/// [`TELEMETRY_MAX_BYTES`]). A file that could not be read is said by a bad line 1; one read
/// in part by a bad line at the first line not read.
pub fn read_telemetry(path: &Path) -> KeptTelemetry {
    let mut kept = KeptTelemetry::default();
    let (bytes, more) = match read_untrusted(path, 2, TELEMETRY_SHOWN, TELEMETRY_MAX_BYTES, true) {
        Untrusted::Missing => return kept,
        Untrusted::Refused(why) => {
            kept.bad_lines.push(BadLine {
                line: 1,
                error: why,
            });
            return kept;
        }
        Untrusted::Read(mut bytes, more) => {
            if more {
                // The last line may be cut: it is left unread with the rest.
                let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
                bytes.truncate(end);
            }
            (bytes, more)
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    if more {
        kept.bad_lines.push(BadLine {
            line: text.lines().count() as u64 + 1,
            error: format!(
                "{TELEMETRY_SHOWN} is over {}; only its first lines were read, up to here",
                div_spec::format_bytes(TELEMETRY_MAX_BYTES)
            ),
        });
    }
    for (i, line) in text.lines().enumerate() {
        let n = i as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(point @ Value::Object(_)) => kept.points.push(TelemetryPoint { line: n, point }),
            Ok(_) => kept.bad_lines.push(BadLine {
                line: n,
                error: "not a JSON object".to_owned(),
            }),
            Err(e) => kept.bad_lines.push(BadLine {
                line: n,
                error: e.to_string(),
            }),
        }
    }
    kept
}

/// The spec's sentence for each entry under the run's `/mnt` that is not a volume and holds
/// something; each is then deleted (a link is deleted, never what it points at).
pub(super) fn lost_under_mnt(mnt: &Path, volumes: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(dir) = fs::read_dir(mnt) else {
        return lines;
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    names.sort();
    for name in names {
        if volumes.contains(&name) {
            continue;
        }
        let path = mnt.join(&name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        let (size, cut) = disk::tree_bytes_at_most(&path, LEFTOVER_MAX_ENTRIES);
        let has_anything = !meta.is_dir()
            || fs::read_dir(&path)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true);
        if has_anything {
            let amount = if cut {
                format!("more than {}", rules::format_bytes_short(size))
            } else {
                rules::format_bytes_short(size)
            };
            lines.push(format!(
                "/mnt/{name} is not a volume, so the {amount} the run wrote there went with the container. Volumes are mounted when a run starts: make {name} first with div storage put {name} <path>, or name /mnt/{name} in the command.",
            ));
        }
        let _ = if meta.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
    }
    lines
}
