//! What the supervisor is given and what it leaves: the run's spec (`run-dir/spec.json`,
//! written by the server), its end record (`run-dir/end.json`), and the result and telemetry
//! it keeps beside them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use div_api::{BadLine, CheckVerdict, RunStatus, TelemetryPoint};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::Plan;
use crate::clock::now_ms;
use crate::{rules, sys};

/// Left by the server in a run directory, holding the reason, when the org's usage limit
/// stops the run (`stopped_by_org`).
pub const ORG_STOP_FILE: &str = "stop-org";
/// Asked by the server (`div stop`): the supervisor stops the run gracefully.
pub const STOP_FILE: &str = "stop";
/// The reason a run killed for its memory (or by a signal from outside) gives.
pub const OOM_REASON: &str = "killed (out of memory, or stopped)";
/// The reason a run stopped at 24 hours gives.
pub const DAY_REASON: &str = "reached the 24-hour limit";
/// The reason of a run stopped because the disk under its log filled up.
pub const DISK_FULL_REASON: &str =
    "no space left on the control plane's disk; the run's log could not be written";
/// Room kept beside the run so its end can be written even when the disk fills up.
pub(super) const RESERVE_BYTES: usize = 64 << 10;
/// The most of `/tmp/divergent/result.json` that is read; a larger one is not read at all.
pub const RESULT_MAX_BYTES: u64 = 16 << 20;
/// The most of `/tmp/divergent/telemetry.jsonl` that is read; the rest is reported unread.
pub const TELEMETRY_MAX_BYTES: u64 = 64 << 20;
/// The run's telemetry file as the run knows it.
pub(super) const TELEMETRY_SHOWN: &str = "/tmp/divergent/telemetry.jsonl";
/// The most entries counted under one leftover folder in the run's `/mnt`.
pub(super) const LEFTOVER_MAX_ENTRIES: usize = 100_000;

/// Everything the supervisor needs, written by the server as `run-dir/spec.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    pub run_id: String,
    pub run_name: String,
    /// Program and arguments: `bwrap … sh -lc <command>` or `sh -lc <command>`.
    pub argv: Vec<String>,
    /// The working directory of `argv` on the host.
    pub cwd: PathBuf,
    /// The whole environment, in order (later wins), but for the secrets.
    pub env: Vec<(String, String)>,
    /// Where the secrets go in `env`. Their values are never in this file: a local
    /// supervisor reads them from its stdin, which the server writes and closes as it
    /// starts it ([`read_secrets`]); a Slurm node's from `secrets_file`. `None`: no secrets
    /// to add (a spec written by an older server holds them in `env`).
    #[serde(default)]
    pub secrets_at: Option<usize>,
    /// Where a Slurm node's supervisor reads the secrets (the run directory's `secrets.json`,
    /// mode 0600, on the directory the nodes share).
    #[serde(default)]
    pub secrets_file: Option<PathBuf>,
    /// Lines written at the top of the log before the command starts.
    pub first_lines: Vec<String>,
    /// Host cores to pin the run to.
    pub cores: Vec<usize>,
    /// The container's memory.
    pub memory_bytes: u64,
    /// Where the run's memory and CPU cgroups are made, where this machine lets us.
    #[serde(default)]
    pub cgroups: Plan,
    pub cents_per_hour: i64,
    pub max_spend_cents: Option<i64>,
    pub max_seconds: u64,
    /// How long a run told to stop (stopped, near its ceiling, near its time limit, stopped
    /// by the org) has between SIGTERM and SIGKILL. A spec without it (written by an older
    /// server) gets the default.
    #[serde(default = "default_grace")]
    pub stop_grace_seconds: u64,
    /// When the run started, in ms since the epoch: spend is metered from here.
    pub started_ms: u64,
    /// Checks, canonical.
    pub checks: Vec<String>,
    /// Where the run's result and telemetry land on the host.
    pub result_path: PathBuf,
    pub telemetry_path: PathBuf,
    /// The host directory behind the run's `/mnt`, when sandboxed, and the volumes mounted in it.
    pub mnt_dir: Option<PathBuf>,
    pub volumes: Vec<String>,
    /// The run's `/workspace` on the host: its copy of the code, or the empty folder its
    /// overlay is mounted on; deleted once it ends.
    pub workspace: PathBuf,
    /// The layers of an overlay `/workspace` (the supervisor mounts it, in the run's own
    /// mount namespace, on `workspace`); `None`: `workspace` is a copy.
    #[serde(default)]
    pub overlay: Option<crate::workspace::Overlay>,
    /// The folder holding `python` that the supervisor lays over `/usr/local/bin` in its own
    /// mount namespace (`sandbox::lay_python_shim`); `None`: bwrap's arguments hold the shim,
    /// or none is needed.
    #[serde(default)]
    pub python_shim: Option<PathBuf>,
    /// `div-init` on the host when the run's first process is div-init (`crate::init`): a
    /// stop is then told to it alone, and it tells every process of the run and waits for
    /// them all. `None` (a spec of an older server): each process is told from here.
    #[serde(default)]
    pub init: Option<PathBuf>,
    /// Set for one node of a run of several (a Slurm job's): what it does besides its own run.
    #[serde(default)]
    pub node: Option<NodeDuties>,
    /// The most processes and threads the run may have at once (`rules::run_tasks`); `None`
    /// (a spec of an older server): [`rules::MAX_RUN_TASKS`].
    #[serde(default)]
    pub tasks: Option<u64>,
    /// The run's disk for its `/tmp`, its own `/mnt` and its `/workspace` (`crate::scratch`);
    /// `None`: not bounded (a spec of an older server, a Slurm node).
    #[serde(default)]
    pub disk: Option<crate::scratch::Disk>,
}

/// What the supervisor of one node of a run does besides its own run: it decides no limit of
/// its own but obeys the control plane's one decision for the whole run, and says it is well.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeDuties {
    /// The run's directory, where the control plane writes its decision ([`decision::FILE`]).
    pub run_dir: PathBuf,
    /// Written every [`HEARTBEAT`] while this node is well: a node whose file stops changing
    /// is lost (`executor::slurm`).
    pub heartbeat: PathBuf,
    /// The node's slurmd's pid file: while it names no live process, Slurm cannot reach this
    /// node, and this supervisor stops saying it is well.
    #[serde(default)]
    pub slurmd_pid_file: Option<PathBuf>,
}

/// How often a node says it is well.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

impl NodeDuties {
    /// Says this node is well (the time, as this node's clock reads it), where its slurmd is
    /// there; when it is not, says so once in the log and stays silent.
    pub(super) fn beat(&self, log: &mut File, slurmd_gone_said: &mut bool) {
        if let Some(pid_file) = &self.slurmd_pid_file
            && let Some(pid) = fs::read_to_string(pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            && !sys::alive(pid)
        {
            if !*slurmd_gone_said {
                *slurmd_gone_said = true;
                let _ = writeln!(
                    log,
                    "div: this node's slurmd (pid {pid}, {}) is gone: Slurm can no longer reach this node",
                    pid_file.display()
                );
            }
            return;
        }
        let _ = fs::write(&self.heartbeat, now_ms().to_string());
    }
}

fn default_grace() -> u64 {
    rules::DEFAULT_STOP_GRACE_SECONDS
}

/// How a run ended, written by the supervisor as `run-dir/end.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndRecord {
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub started_ms: u64,
    pub ended_ms: u64,
    pub duration_seconds: u64,
    pub spent_cents: i64,
    pub verdicts: Vec<CheckVerdict>,
}

/// The result as kept after the run: `run-dir/result.kept.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeptResult {
    pub result: Option<Value>,
    pub problem: Option<String>,
    /// The result's JSON text, which checks judge: numbers compare as written, not as `f64`.
    /// Kept too, so that `GET /v1/runs/{run}/result` sends the numbers as written and
    /// `div result --check` judges them exactly (absent from a record kept before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The telemetry as kept after the run: `run-dir/telemetry.kept.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeptTelemetry {
    pub points: Vec<TelemetryPoint>,
    pub bad_lines: Vec<BadLine>,
}

/// Writes `value` as JSON to `path` atomically: a temporary file, then a rename. The file is
/// the owner's alone (mode 0600): `spec.json` holds the run's secrets.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    let _ = fs::remove_file(&tmp);
    let mut file = private_file(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

/// A new file only its owner may read or write.
fn private_file(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// The end of a run that never got going: failed, with `reason`, nothing spent.
pub(super) fn early_end(spec: &RunSpec, reason: String) -> EndRecord {
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
