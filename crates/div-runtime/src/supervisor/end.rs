//! After the run: how it ended (status, exit code, reason, spend), what it left (its result
//! and the checks judged on it, its telemetry, what it wrote under `/mnt` that is not a
//! volume), and its places let go.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::ExitStatus;

use div_api::{CheckVerdict, RunStatus};

use super::prepare::Room;
use super::spec::{
    DISK_FULL_REASON, EndRecord, OOM_REASON, RunSpec, TELEMETRY_SHOWN, write_json_atomic,
};
use super::untrusted::{lost_under_mnt, read_result, read_telemetry};
use super::watch::Stopped;
use crate::clock::now_ms;
use crate::decision::{self, Decision};
use crate::{phases, rules, scratch, sys};

/// The run's end record, once its processes are gone (`status` is its first process's):
/// its outcome, then what it left is kept and judged; and its places, let go once the end is
/// written (a second spent unmounting a disk is not a second the run's end waits for).
pub(super) fn record(
    run_dir: &Path,
    spec: &RunSpec,
    mut room: Room,
    stopped: Stopped,
    status: std::io::Result<ExitStatus>,
    stopping: bool,
    killed_in_grace_for_memory: bool,
) -> (EndRecord, Places) {
    // Killed for its memory while it was stopping (the stop is still why it ended): said, so
    // that a result its handler never wrote is not a mystery.
    if stopping && (killed_in_grace_for_memory || room.cgroups.oom_killed()) {
        let _ = writeln!(
            room.log,
            "div: the run was killed for its memory ({} GiB) during its grace, before it had exited",
            spec.memory_bytes >> 30
        );
    }
    if let Stopped::Org(why) = &stopped {
        let _ = writeln!(room.log, "div: stopped by the org: {why}");
    }
    let ended_ms = now_ms();
    let oom = matches!(stopped, Stopped::Memory) || room.cgroups.oom_killed();
    room.cgroups.remove();
    let elapsed_ms = ended_ms.saturating_sub(spec.started_ms);
    // Billed to its end, or (a lost node's decision) to the moment the run was found lost.
    let billed_ms = match &stopped {
        Stopped::Decided(Decision {
            spend_until_ms: Some(until),
            ..
        }) => (*until).min(ended_ms).saturating_sub(spec.started_ms),
        _ => elapsed_ms,
    };
    let spent = rules::charge(spec.cents_per_hour, billed_ms / 1000, spec.max_spend_cents);
    let (status, exit_code, reason) = outcome(stopped, status, oom, spec, &room.log_path);
    let verdicts = collect(run_dir, spec, &mut room.log);
    phases::mark(run_dir, "judged");
    let end = EndRecord {
        status,
        exit_code,
        reason,
        started_ms: spec.started_ms,
        ended_ms,
        duration_seconds: elapsed_ms / 1000,
        spent_cents: spent,
        verdicts,
    };
    let places = Places {
        overlay: room.overlay,
        own_disk: room.own_disk,
        on_disk: room.on_disk,
    };
    (end, places)
}

/// The run's status, exit code and reason: what stopped it, its own code when it exited, a
/// kill for its memory when nothing else stopped it, its log's last line when it failed
/// without a reason of its own.
fn outcome(
    stopped: Stopped,
    status: std::io::Result<ExitStatus>,
    oom: bool,
    spec: &RunSpec,
    log_path: &Path,
) -> (RunStatus, Option<i32>, Option<String>) {
    // A run that exited (often failing) as its log filled the disk says so too.
    let stopped = match stopped {
        Stopped::Exited
            if !status.as_ref().is_ok_and(|s| s.success()) && sys::disk_full(log_path) =>
        {
            Stopped::DiskFull
        }
        other => other,
    };
    let exited = matches!(stopped, Stopped::Exited | Stopped::Memory);
    let (mut status, mut exit_code, mut reason) = match stopped {
        Stopped::DiskFull => (RunStatus::Failed, None, Some(DISK_FULL_REASON.to_owned())),
        Stopped::Exited => match status.map_or(1, exit_code_of) {
            0 => (RunStatus::Succeeded, Some(0), None),
            code => (RunStatus::Failed, Some(code), None),
        },
        Stopped::Canceled => (RunStatus::Canceled, None, None),
        Stopped::Org(why) => (RunStatus::StoppedByOrg, None, Some(why)),
        Stopped::Ceiling => (RunStatus::HitCeiling, None, None),
        Stopped::Day => (
            RunStatus::Failed,
            None,
            Some(decision::time_limit_reason(spec.max_seconds)),
        ),
        Stopped::Memory => (RunStatus::Failed, Some(137), Some(OOM_REASON.to_owned())),
        Stopped::Decided(d) => {
            let (status, reason) = d.status();
            (status, None, reason)
        }
        Stopped::Gone => (RunStatus::Failed, None, None),
        Stopped::DiskLimit(bytes) => (
            RunStatus::Failed,
            None,
            Some(format!(
                "its /tmp, /workspace and own /mnt passed its disk of {}",
                div_spec::format_bytes(bytes)
            )),
        ),
    };
    // Killed for its memory by the kernel, with nothing else stopping it.
    if oom && exited {
        status = RunStatus::Failed;
        exit_code = Some(137);
        reason = Some(OOM_REASON.to_owned());
    }
    if status == RunStatus::Failed && reason.is_none() {
        reason = last_line(log_path);
    }
    (status, exit_code, reason)
}

/// What the run left, read without trusting it and kept: its result and the checks judged
/// on it (said in the log), its telemetry, what it wrote under `/mnt` that is not a volume.
fn collect(run_dir: &Path, spec: &RunSpec, log: &mut File) -> Vec<CheckVerdict> {
    let (kept, hostile) = read_result(&spec.result_path);
    let _ = write_json_atomic(&run_dir.join("result.kept.json"), &kept);
    if let Some(problem) = &hostile {
        let _ = writeln!(log, "div: {problem}");
    }
    let verdicts: Vec<CheckVerdict> = spec
        .checks
        .iter()
        .map(|c| {
            let mut v = rules::judge(c, kept.text.as_deref());
            // A check that could not be judged says what was wrong with the file.
            if let Some(problem) = &hostile {
                v.line = format!("{} ({problem})", v.line);
            }
            v
        })
        .collect();
    for v in &verdicts {
        let _ = writeln!(log, "{}", v.line);
    }
    let telemetry = read_telemetry(&spec.telemetry_path);
    for bad in &telemetry.bad_lines {
        if bad.error.starts_with(TELEMETRY_SHOWN) {
            let _ = writeln!(log, "div: {}", bad.error);
        }
    }
    let _ = write_json_atomic(&run_dir.join("telemetry.kept.json"), &telemetry);
    if let Some(mnt) = &spec.mnt_dir {
        for line in lost_under_mnt(mnt, &spec.volumes) {
            let _ = writeln!(log, "{line}");
        }
    }
    let _ = log.sync_all();
    verdicts
}

/// Lets the run's places go: off `/workspace` first (in this supervisor's own namespace), so
/// what is deleted next is the layers themselves, not the merged view; then its own disk
/// whole; then its `/workspace`, `/tmp` and own `/mnt` (what it left there was read above).
/// What of the run's places is let go once its end is written ([`Places::let_go`]).
pub(super) struct Places {
    overlay: bool,
    own_disk: bool,
    on_disk: Vec<std::path::PathBuf>,
}

impl Places {
    /// Its overlay `/workspace` unmounted, its own disk let go (the space free again), its
    /// `/workspace`, `/tmp` and `/mnt` removed from the run directory.
    pub(super) fn let_go(&self, run_dir: &Path, spec: &RunSpec) {
        clean_up(run_dir, spec, self);
    }
}

fn clean_up(run_dir: &Path, spec: &RunSpec, room: &Places) {
    if room.overlay {
        let _ = sys::unmount(&spec.workspace);
    }
    if room.own_disk {
        scratch::remove(run_dir, &room.on_disk);
    }
    if let Some(layers) = &spec.overlay {
        layers.remove();
    }
    let _ = fs::remove_dir_all(&spec.workspace);
    if let Some(tmp) = spec.result_path.parent().and_then(Path::parent)
        && tmp.starts_with(run_dir)
    {
        let _ = fs::remove_dir_all(tmp);
    }
    if let Some(mnt) = &spec.mnt_dir
        && mnt.starts_with(run_dir)
    {
        let _ = fs::remove_dir_all(mnt);
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// A failed run's reason: its log's last non-empty line, at most 200 characters. Only the
/// log's last 64 KiB are read, however large it grew.
fn last_line(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(64 << 10)))
        .ok()?;
    let mut bytes = Vec::new();
    file.take(64 << 10).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}
