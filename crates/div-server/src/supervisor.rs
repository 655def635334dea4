//! The per-run supervisor: a small process, in its own session, that owns one run.
//!
//! The server writes `run-dir/spec.json` and launches it; it runs the command, appends its
//! output to `run-dir/log`, holds it to its memory, cores, ceiling and 24 hours, judges the
//! checks once it exits and writes `run-dir/end.json` last, atomically. Nothing it does
//! depends on the server still running.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use div_api::{BadLine, CheckVerdict, RunStatus, TelemetryPoint};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::{Plan, RunCgroups};
use crate::clock::now_ms;
use crate::{disk, rules, sys};

/// The reason a run killed for its memory (or by a signal from outside) gives.
pub(crate) const OOM_REASON: &str = "killed (out of memory, or stopped)";
/// The reason a run stopped at 24 hours gives.
pub(crate) const DAY_REASON: &str = "reached the 24-hour limit";
/// The reason of a run stopped because the disk under its log filled up.
pub(crate) const DISK_FULL_REASON: &str =
    "no space left on the control plane's disk; the run's log could not be written";
/// Room kept beside the run so its end can be written even when the disk fills up.
const RESERVE_BYTES: usize = 64 << 10;

/// Everything the supervisor needs, written by the server as `run-dir/spec.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunSpec {
    pub(crate) run_id: String,
    pub(crate) run_name: String,
    /// Program and arguments: `bwrap … sh -lc <command>` or `sh -lc <command>`.
    pub(crate) argv: Vec<String>,
    /// The working directory of `argv` on the host.
    pub(crate) cwd: PathBuf,
    /// The whole environment, in order (later wins).
    pub(crate) env: Vec<(String, String)>,
    /// Lines written at the top of the log before the command starts.
    pub(crate) first_lines: Vec<String>,
    /// Host cores to pin the run to.
    pub(crate) cores: Vec<usize>,
    /// The container's memory.
    pub(crate) memory_bytes: u64,
    /// Where the run's memory and CPU cgroups are made, where this machine lets us.
    #[serde(default)]
    pub(crate) cgroups: Plan,
    pub(crate) cents_per_hour: i64,
    pub(crate) max_spend_cents: Option<i64>,
    pub(crate) max_seconds: u64,
    /// When the run started, in ms since the epoch: spend is metered from here.
    pub(crate) started_ms: u64,
    /// Checks, canonical.
    pub(crate) checks: Vec<String>,
    /// Where the run's result and telemetry land on the host.
    pub(crate) result_path: PathBuf,
    pub(crate) telemetry_path: PathBuf,
    /// The host directory behind the run's `/mnt`, when sandboxed, and the volumes mounted in it.
    pub(crate) mnt_dir: Option<PathBuf>,
    pub(crate) volumes: Vec<String>,
    /// The run's copy of the code, deleted once it ends.
    pub(crate) workspace: PathBuf,
}

/// How a run ended, written by the supervisor as `run-dir/end.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct EndRecord {
    pub(crate) status: RunStatus,
    pub(crate) exit_code: Option<i32>,
    pub(crate) reason: Option<String>,
    pub(crate) started_ms: u64,
    pub(crate) ended_ms: u64,
    pub(crate) duration_seconds: u64,
    pub(crate) spent_cents: i64,
    pub(crate) verdicts: Vec<CheckVerdict>,
}

/// The result as kept after the run: `run-dir/result.kept.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct KeptResult {
    pub(crate) result: Option<Value>,
    pub(crate) problem: Option<String>,
    /// The result's JSON text, which checks judge: numbers compare as written, not as `f64`.
    #[serde(skip)]
    pub(crate) text: Option<String>,
}

/// The telemetry as kept after the run: `run-dir/telemetry.kept.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct KeptTelemetry {
    pub(crate) points: Vec<TelemetryPoint>,
    pub(crate) bad_lines: Vec<BadLine>,
}

/// Writes `value` as JSON to `path` atomically: a temporary file, then a rename.
pub(crate) fn write_json_atomic(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let mut file = File::create(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// The body of `div __supervise <run-dir>` and `div-supervise <run-dir>`.
pub(crate) fn supervise(run_dir: &Path) -> i32 {
    sys::new_session();
    sys::catch_stop_signals();
    let spec: RunSpec = match fs::read(run_dir.join("spec.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(spec) => spec,
        Err(e) => {
            let now = now_ms();
            let end = EndRecord {
                status: RunStatus::Failed,
                exit_code: None,
                reason: Some(format!("the supervisor could not read its spec: {e}")),
                started_ms: now,
                ended_ms: now,
                duration_seconds: 0,
                spent_cents: 0,
                verdicts: Vec::new(),
            };
            let _ = write_json_atomic(&run_dir.join("end.json"), &end);
            return 1;
        }
    };
    // Room for the end: released (and the write retried) if the disk fills up.
    let reserve = run_dir.join("end.reserve");
    let _ = fs::write(&reserve, vec![0u8; RESERVE_BYTES]);
    let end = run(run_dir, &spec);
    let written = write_json_atomic(&run_dir.join("end.json"), &end).or_else(|_| {
        let _ = fs::remove_file(&reserve);
        write_json_atomic(&run_dir.join("end.json"), &end)
    });
    let _ = fs::remove_file(&reserve);
    match written {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// How the watching loop ended.
enum Stopped {
    Exited(std::process::ExitStatus),
    Canceled,
    /// Stopped by the org (its usage limit), with the reason the server gave.
    Org(String),
    Ceiling,
    Day,
    Memory,
    DiskFull,
}

fn run(run_dir: &Path, spec: &RunSpec) -> EndRecord {
    let log_path = run_dir.join("log");
    let mut log = match OpenOptions::new().create(true).append(true).open(&log_path) {
        Ok(f) => f,
        Err(e) => return early_end(spec, format!("the log could not be opened: {e}")),
    };
    for line in &spec.first_lines {
        let _ = writeln!(log, "{line}");
    }
    if !spec.cores.is_empty()
        && let Err(e) = sys::set_affinity(&spec.cores)
    {
        let _ = writeln!(log, "div: could not pin the run to its cores: {e}");
    }
    let cgroups = RunCgroups::make(
        &spec.cgroups,
        &spec.run_id,
        spec.memory_bytes,
        spec.cores.len(),
    );
    if spec.cgroups.memory.is_some() && cgroups.memory.is_none() {
        let _ = writeln!(
            log,
            "div: no memory cgroup could be made; memory is held by polling (a soft limit)"
        );
    }
    if spec.cgroups.cpu.is_some() && cgroups.cpu.is_none() && !spec.cores.is_empty() {
        let _ = writeln!(
            log,
            "div: no CPU cgroup could be made; the run is held to its cores by affinity alone"
        );
    }
    let mut argv: Vec<String> = Vec::new();
    let dirs = cgroups.dirs();
    if !dirs.is_empty() {
        // A shell that moves itself into each cgroup, then becomes the command: the run is in
        // its cgroups before it execs, and the supervisor stays outside them.
        argv.extend([
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || exit 125; shift; done; shift; exec \"$@\""
                .to_owned(),
            "sh".to_owned(),
        ]);
        argv.extend(
            dirs.iter()
                .map(|d| d.join("cgroup.procs").display().to_string()),
        );
        argv.push("--".to_owned());
    }
    argv.extend(spec.argv.iter().cloned());
    let (Ok(out), Ok(err)) = (log.try_clone(), log.try_clone()) else {
        return early_end(spec, "the log could not be shared with the run".to_owned());
    };
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(log, "div: the run could not start: {e}");
            cgroups.remove();
            return early_end(spec, format!("the run could not start: {e}"));
        }
    };
    let stop_file = run_dir.join("stop");
    let mut last_poll = std::time::Instant::now();
    let stopped = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Stopped::Exited(status),
            Ok(None) => {}
            Err(_) => break Stopped::Canceled,
        }
        let elapsed = now_ms().saturating_sub(spec.started_ms);
        // Stopped by the org: the server wrote why (`org::STOP_FILE`) before asking the stop.
        if let Ok(reason) = fs::read_to_string(run_dir.join(crate::org::STOP_FILE)) {
            break Stopped::Org(reason.trim().chars().take(200).collect());
        }
        if sys::stop_requested() || stop_file.exists() {
            break Stopped::Canceled;
        }
        if let Some(ceiling) = spec.max_spend_cents
            && rules::ceiling_reached(spec.cents_per_hour, ceiling, elapsed / 1000)
        {
            break Stopped::Ceiling;
        }
        if elapsed >= spec.max_seconds.saturating_mul(1000) {
            break Stopped::Day;
        }
        if last_poll.elapsed() >= Duration::from_millis(50) {
            last_poll = std::time::Instant::now();
            if cgroups.memory.is_none() && tree_rss(child.id()) > spec.memory_bytes {
                break Stopped::Memory;
            }
            // A full disk: the run's output is being lost, so it is stopped and says why.
            if sys::disk_full(&log_path) {
                break Stopped::DiskFull;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    kill_tree(&mut child, &cgroups);
    if let Stopped::Org(why) = &stopped {
        let _ = writeln!(log, "div: stopped by the org: {why}");
    }
    let ended_ms = now_ms();
    let oom = matches!(stopped, Stopped::Memory) || cgroups.oom_killed();
    cgroups.remove();
    let elapsed_ms = ended_ms.saturating_sub(spec.started_ms);
    let duration_seconds = elapsed_ms / 1000;
    let spent = rules::charge(spec.cents_per_hour, duration_seconds, spec.max_spend_cents);
    // A run that exited (often failing) as its log filled the disk says so too.
    let stopped = match stopped {
        Stopped::Exited(st) if !st.success() && sys::disk_full(&log_path) => Stopped::DiskFull,
        other => other,
    };
    let (mut status, exit_code, mut reason) = match stopped {
        Stopped::DiskFull => (RunStatus::Failed, None, Some(DISK_FULL_REASON.to_owned())),
        Stopped::Exited(st) => {
            let code = exit_code_of(st);
            if code == 0 {
                (RunStatus::Succeeded, Some(0), None)
            } else {
                (RunStatus::Failed, Some(code), None)
            }
        }
        Stopped::Canceled => (RunStatus::Canceled, None, None),
        Stopped::Org(ref why) => (RunStatus::StoppedByOrg, None, Some(why.clone())),
        Stopped::Ceiling => (RunStatus::HitCeiling, None, None),
        Stopped::Day => (RunStatus::Failed, None, Some(DAY_REASON.to_owned())),
        Stopped::Memory => (RunStatus::Failed, Some(137), Some(OOM_REASON.to_owned())),
    };
    let mut exit_code = exit_code;
    if oom
        && !matches!(
            stopped,
            Stopped::Canceled
                | Stopped::Org(_)
                | Stopped::Ceiling
                | Stopped::Day
                | Stopped::DiskFull
        )
    {
        status = RunStatus::Failed;
        exit_code = Some(137);
        reason = Some(OOM_REASON.to_owned());
    }
    if status == RunStatus::Failed && reason.is_none() {
        reason = last_line(&log_path);
    }
    // After exit: result, verdicts, telemetry, what was lost under /mnt, then clean up.
    let kept = read_result(&spec.result_path);
    let _ = write_json_atomic(&run_dir.join("result.kept.json"), &kept);
    let verdicts: Vec<CheckVerdict> = spec
        .checks
        .iter()
        .map(|c| rules::judge(c, kept.text.as_deref()))
        .collect();
    for v in &verdicts {
        let _ = writeln!(log, "{}", v.line);
    }
    let telemetry = read_telemetry(&spec.telemetry_path);
    let _ = write_json_atomic(&run_dir.join("telemetry.kept.json"), &telemetry);
    if let Some(mnt) = &spec.mnt_dir {
        for line in lost_under_mnt(mnt, &spec.volumes) {
            let _ = writeln!(log, "{line}");
        }
    }
    let _ = log.sync_all();
    let _ = fs::remove_dir_all(&spec.workspace);
    EndRecord {
        status,
        exit_code,
        reason,
        started_ms: spec.started_ms,
        ended_ms,
        duration_seconds,
        spent_cents: spent,
        verdicts,
    }
}

fn early_end(spec: &RunSpec, reason: String) -> EndRecord {
    let now = now_ms();
    EndRecord {
        status: RunStatus::Failed,
        exit_code: None,
        reason: Some(reason),
        started_ms: spec.started_ms,
        ended_ms: now,
        duration_seconds: now.saturating_sub(spec.started_ms) / 1000,
        spent_cents: 0,
        verdicts: Vec::new(),
    }
}

fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// A failed run's reason: its log's last non-empty line, at most 200 characters.
fn last_line(log: &Path) -> Option<String> {
    let bytes = fs::read(log).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}

/// Every process under `root` (itself included), from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
                // The command name is in parentheses and may hold spaces: read after the last `)`.
                if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r)
                    && let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok())
                {
                    parent.insert(pid, ppid);
                }
            }
        }
    }
    let mut tree = BTreeSet::from([root]);
    loop {
        let before = tree.len();
        for (&pid, ppid) in &parent {
            if tree.contains(ppid) {
                tree.insert(pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    tree.into_iter().collect()
}

/// The resident memory of the process tree under `root`, in bytes.
fn tree_rss(root: u32) -> u64 {
    let page = sys::page_size();
    descendants(root)
        .into_iter()
        .filter_map(|pid| fs::read_to_string(format!("/proc/{pid}/statm")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
        })
        .map(|pages| pages * page)
        .sum()
}

/// Kills everything the run started: its process group, every descendant, and everything
/// in its cgroup; then reaps the child. No orphan survives.
fn kill_tree(child: &mut Child, cgroups: &RunCgroups) {
    let pid = child.id();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut any = false;
        for p in descendants(pid) {
            if p != std::process::id() && sys::kill(p, libc::SIGKILL) {
                any = true;
            }
        }
        any |= sys::kill_group(pid, libc::SIGKILL);
        for p in cgroups.pids() {
            any |= sys::kill(p, libc::SIGKILL);
        }
        let _ = child.try_wait();
        if !any || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.wait();
}

fn read_result(path: &Path) -> KeptResult {
    match fs::read(path) {
        Err(_) => KeptResult {
            result: None,
            problem: Some("the run wrote no result".to_owned()),
            text: None,
        },
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
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
        },
    }
}

pub(crate) fn read_telemetry(path: &Path) -> KeptTelemetry {
    let mut kept = KeptTelemetry::default();
    let Ok(bytes) = fs::read(path) else {
        return kept;
    };
    for (i, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
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

/// The spec's sentence for each directory under the run's `/mnt` that is not a volume and
/// holds something; each is then deleted.
fn lost_under_mnt(mnt: &Path, volumes: &[String]) -> Vec<String> {
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
        let size = disk::tree_bytes(&path);
        let has_anything = fs::read_dir(&path)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true);
        if has_anything {
            lines.push(format!(
                "/mnt/{name} is not a volume, so the {} the run wrote there went with the container. Volumes are mounted when a run starts: make {name} first with div storage put {name} <path>, or name /mnt/{name} in the command.",
                rules::format_bytes_short(size)
            ));
        }
        let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec for `command` under `sh -c`, with no cgroup, no cores and no sandbox.
    fn spec(dir: &Path, command: &str, max_seconds: u64) -> RunSpec {
        let tmp = dir.join("tmp");
        fs::create_dir_all(tmp.join("divergent")).expect("tmp");
        let workspace = dir.join("workspace");
        fs::create_dir_all(&workspace).expect("workspace");
        RunSpec {
            run_id: "r_limit".to_owned(),
            run_name: "limit".to_owned(),
            argv: vec!["sh".to_owned(), "-c".to_owned(), command.to_owned()],
            cwd: workspace.clone(),
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            first_lines: Vec::new(),
            cores: Vec::new(),
            memory_bytes: 1 << 40,
            cgroups: Plan::default(),
            cents_per_hour: 0,
            max_spend_cents: None,
            max_seconds,
            started_ms: now_ms(),
            checks: Vec::new(),
            result_path: tmp.join("divergent/result.json"),
            telemetry_path: tmp.join("divergent/telemetry.jsonl"),
            mnt_dir: None,
            volumes: Vec::new(),
            workspace,
        }
    }

    #[test]
    fn a_run_past_its_time_limit_is_stopped_with_the_day_reason() {
        // The limit is spec.json's `max_seconds` (the server writes 24 hours); 1 s here.
        let dir = tempfile::tempdir().expect("a temp dir");
        let marker = dir.path().join("child-pid");
        let command = format!("sleep 1000 & echo $! > {}; sleep 1000", marker.display());
        let end = run(dir.path(), &spec(dir.path(), &command, 1));
        assert_eq!(end.status, RunStatus::Failed);
        assert_eq!(end.reason.as_deref(), Some(DAY_REASON));
        assert_eq!(end.exit_code, None);
        assert!(end.duration_seconds >= 1, "{end:?}");
        let child: u32 = fs::read_to_string(&marker)
            .expect("the run wrote its child's pid")
            .trim()
            .parse()
            .expect("a pid");
        // Gone, or a zombie waiting for whoever adopted it: not running either way.
        let state = fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        assert!(
            !sys::alive(child) || zombie,
            "the background child survived the limit"
        );
    }

    #[test]
    fn a_run_within_its_time_limit_ends_on_its_own() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let end = run(dir.path(), &spec(dir.path(), "echo done", 60));
        assert_eq!(end.status, RunStatus::Succeeded);
        assert_eq!(end.reason, None);
        let log = fs::read_to_string(dir.path().join("log")).expect("a log");
        assert_eq!(log, "done\n");
    }
}
