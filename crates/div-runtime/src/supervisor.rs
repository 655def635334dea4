//! The per-run supervisor: a small process, in its own session, that owns one run.
//!
//! The server writes `run-dir/spec.json` and launches it; it runs the command, appends its
//! output to `run-dir/log`, holds it to its memory, cores, ceiling and 24 hours, judges the
//! checks once it exits and writes `run-dir/end.json` last, atomically. Nothing it does
//! depends on the server still running.
//!
//! Why over 700 lines: about 240 are its tests; the rest is one process's life in order (start,
//! launch, watch, meter, stop, judge, record the end). The run's process tree (finding, telling
//! and killing it) is in `tree`, and reading back what the run left without trusting it in
//! `untrusted`.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use div_api::{BadLine, CheckVerdict, RunStatus, TelemetryPoint};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::{Plan, RunCgroups};
use crate::clock::now_ms;
use crate::decision::{self, Decision, Limit};
use crate::{rules, sys};

mod tree;
mod untrusted;

use tree::{kill_tree, tell_init, terminate, tree_rss};
pub use untrusted::read_telemetry;
use untrusted::{lost_under_mnt, read_result};

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
const RESERVE_BYTES: usize = 64 << 10;
/// The most of `/tmp/divergent/result.json` that is read; a larger one is not read at all.
pub const RESULT_MAX_BYTES: u64 = 16 << 20;
/// The most of `/tmp/divergent/telemetry.jsonl` that is read; the rest is reported unread.
pub const TELEMETRY_MAX_BYTES: u64 = 64 << 20;
/// The run's telemetry file as the run knows it.
const TELEMETRY_SHOWN: &str = "/tmp/divergent/telemetry.jsonl";
/// The most entries counted under one leftover folder in the run's `/mnt`.
const LEFTOVER_MAX_ENTRIES: usize = 100_000;
/// The environment the supervisor starts the sandbox (or an unsandboxed run's cgroup shell)
/// with: fixed, never the run's. The run's own variables reach it through bwrap's
/// `--setenv`, read by `--args 0` from a pipe the supervisor writes (never a file), inside
/// the sandbox.
const LAUNCH_ENV: [(&str, &str); 2] = [
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("LANG", "C.UTF-8"),
];

/// The file a run's supervisor holds locked (`flock`) for as long as it is the run's
/// supervisor. One run directory has at most one supervisor: a second one started on it (a
/// launch repeated after the server was killed mid-launch) finds it locked and leaves at
/// once, touching nothing. The server reads "still there" from it when it does not know the
/// supervisor's pid.
pub const LOCK_FILE: &str = "supervisor.lock";
/// Left by the server, under the lock, in a run directory it has recorded as lost: a
/// supervisor that starts there afterwards (one that was still inside its `exec` when the
/// server gave up on it) leaves without running anything.
pub const ABANDONED_FILE: &str = "abandoned";
/// Left by a supervisor that got not a byte of the secrets it waited for on stdin: the server
/// was killed between starting it and sending them. It ran nothing; the restarted server
/// places the run again.
pub const UNSENT_FILE: &str = "secrets.unsent";

/// Takes the run directory's [`LOCK_FILE`]: `Ok(Some)` holds it until dropped, `Ok(None)`
/// when another process holds it now. The lock file is never inherited by the run (std
/// opens it close-on-exec).
pub fn claim(run_dir: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(run_dir.join(LOCK_FILE))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(fs::TryLockError::WouldBlock) => Ok(None),
        Err(fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The run's lock for its supervisor: `Some(Some(lock))`, or `Some(None)` where no lock file
/// can be made (the run goes on without it, as before locks); `None` when another holds it
/// for longer than `patience`, which is another supervisor of the run, holding it for its life:
/// this one gives way. Held a moment only, it is looked for again: the server takes the lock
/// to see whether a supervisor is gone, and a process it forks meanwhile holds it (its copy of
/// the server's descriptor) until its `exec` closes it. A supervisor started then left without
/// a word and its run read as lost
/// (`runs::a_supervisor_whose_secrets_never_came_runs_nothing_and_the_run_is_placed_again`,
/// twice in an afternoon's full runs).
fn claim_waiting(run_dir: &Path, patience: std::time::Duration) -> Option<Option<File>> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match claim(run_dir) {
            Ok(Some(lock)) => return Some(Some(lock)),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Ok(None) => return None,
            Err(_) => return Some(None),
        }
    }
}

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
    fn beat(&self, log: &mut File, slurmd_gone_said: &mut bool) {
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

/// The body of `div __supervise <run-dir>` and `div-supervise <run-dir>`.
pub fn supervise(run_dir: &Path) -> i32 {
    sys::new_session();
    sys::catch_stop_signals();
    // One supervisor per run, and none for a run already ended or given up on: held until
    // this process exits, after its end is written.
    // (A lock file that cannot be made at all, the run goes on without it, as before locks.)
    let _claim = match claim_waiting(run_dir, std::time::Duration::from_secs(1)) {
        Some(lock) => lock,
        None => return 0,
    };
    if run_dir.join(ABANDONED_FILE).exists() || run_dir.join("end.json").exists() {
        return 0;
    }
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
    let mut spec = spec;
    if let Some(at) = spec.secrets_at.take() {
        let from_server = spec.secrets_file.is_none();
        let read = match spec.secrets_file.take() {
            Some(file) => File::open(&file).and_then(read_secrets),
            None => read_secrets(io::stdin()),
        };
        match read {
            Ok(secrets) => {
                let at = at.min(spec.env.len());
                spec.env.splice(at..at, secrets);
            }
            // Not a byte: the server was killed between starting this supervisor and sending
            // the secrets (it always sends at least `[]`). Nothing has run: the run is left,
            // marked, for the restarted server to place again with its secrets.
            Err(e) if from_server && e.kind() == io::ErrorKind::UnexpectedEof => {
                let _ = fs::write(run_dir.join(UNSENT_FILE), b"");
                return 0;
            }
            Err(e) => {
                let end = early_end(&spec, format!("the run's secrets could not be read: {e}"));
                let _ = write_json_atomic(&run_dir.join("end.json"), &end);
                return 1;
            }
        }
    }
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

/// The most of the secrets read: far past what the server lets be set.
const SECRETS_MAX_BYTES: u64 = 64 << 20;

/// The run's secrets, as JSON `[["NAME", "value"], …]`, from the server's pipe (or a Slurm
/// node's file).
/// Nothing at all (`UnexpectedEof`) is told apart from bytes that are not secrets.
pub fn read_secrets(from: impl io::Read) -> io::Result<Vec<(String, String)>> {
    let mut bytes = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(from, SECRETS_MAX_BYTES), &mut bytes)?;
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no secrets were sent",
        ));
    }
    serde_json::from_slice(&bytes).map_err(io::Error::other)
}

/// How the watching loop ended.
enum Stopped {
    Exited,
    Canceled,
    /// Stopped by the org (its usage limit), with the reason the server gave.
    Org(String),
    Ceiling,
    Day,
    Memory,
    DiskFull,
    /// The control plane's decision for the whole run (a node of several).
    Decided(Decision),
    /// Its run directory is gone, or is not the one it started in.
    Gone,
    /// Its writable places passed its disk (measured: no filesystem of its own).
    DiskLimit(u64),
}

/// How often a disk without a filesystem of its own is measured.
const DISK_MEASURED_EVERY: Duration = Duration::from_secs(3);

/// The run's writable places in its directory: its `/tmp`, its own `/mnt`, and its
/// `/workspace` (the overlay's layers, or the copy).
fn writable_places(run_dir: &Path, spec: &RunSpec) -> Vec<PathBuf> {
    let mut places = Vec::new();
    if let Some(tmp) = spec.result_path.parent().and_then(Path::parent)
        && tmp.starts_with(run_dir)
    {
        places.push(tmp.to_path_buf());
    }
    if let Some(mnt) = &spec.mnt_dir {
        places.push(mnt.clone());
    }
    match &spec.overlay {
        Some(layers) => places.extend(layers.upper.parent().map(Path::to_path_buf)),
        None => places.push(spec.workspace.clone()),
    }
    places.retain(|p| p.starts_with(run_dir));
    places
}

/// A directory's device and inode: which directory it is, whatever its name.
fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether `dir` is still the directory `own` identified.
fn same_dir(dir: &Path, own: Option<(u64, u64)>) -> bool {
    own.is_none() || dir_identity(dir) == own
}

fn run(run_dir: &Path, spec: &RunSpec) -> EndRecord {
    let own_dir = dir_identity(run_dir);
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
    let tasks = spec.tasks.unwrap_or(rules::MAX_RUN_TASKS);
    let cgroups = RunCgroups::make(
        &spec.cgroups,
        &spec.run_id,
        spec.memory_bytes,
        spec.cores.len(),
        tasks,
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
    let sandboxed = spec.mnt_dir.is_some();
    let overlay = spec.overlay.as_ref().filter(|_| sandboxed);
    // The overlay `/workspace` and the `python` shim, mounted in a mount namespace this
    // supervisor makes its own, which bubblewrap inherits: no process is started for them.
    let shim = spec.python_shim.as_deref().filter(|_| sandboxed);
    // The run's writable places: on its own disk where it has one (`crate::scratch`), else
    // measured against its size.
    let places = writable_places(run_dir, spec);
    // A copy of the code (no overlay) stays where the launcher made it: only folders are
    // laid onto a disk of its own.
    let on_disk: Vec<PathBuf> = places
        .iter()
        .filter(|p| **p != spec.workspace)
        .cloned()
        .collect();
    let mut disk = spec.disk.clone().filter(|_| sandboxed);
    let own_disk = disk.as_ref().is_some_and(|d| d.own_filesystem);
    if overlay.is_some() || shim.is_some() || own_disk {
        // Without root, in a user namespace of its own first, as its own user (the server
        // found that works: `workspace::overlay_works`).
        let namespace = if rustix::process::geteuid().is_root() {
            sys::private_mount_namespace()
        } else {
            sys::private_user_and_mount_namespace()
        };
        if let (Ok(()), Some(d)) = (&namespace, disk.as_mut().filter(|d| d.own_filesystem))
            && let Err(e) = crate::scratch::mount(run_dir, d.bytes, &on_disk)
        {
            // Still held to its size, by measuring (a soft limit), and said.
            crate::scratch::remove(run_dir, &on_disk);
            let _ = writeln!(
                log,
                "div: the run's own disk could not be made ({e}); its disk is measured instead, a soft limit"
            );
            d.own_filesystem = false;
        }
        let mounted = namespace
            .and_then(|()| overlay.map_or(Ok(()), |o| o.mount(&spec.workspace)))
            .and_then(|()| shim.map_or(Ok(()), crate::sandbox::lay_python_shim));
        if let Err(e) = mounted {
            let _ = writeln!(log, "div: the run's /workspace could not be mounted: {e}");
            cgroups.remove();
            crate::scratch::remove(run_dir, &on_disk);
            return early_end(
                spec,
                format!("the run's /workspace could not be mounted: {e}"),
            );
        }
    }
    let argv: Vec<String> = if sandboxed {
        // bwrap is started directly, with LAUNCH_ENV. Its first act is to read its arguments
        // (`--args 0`) from the pipe on its stdin, which the supervisor writes only once bwrap
        // is in the run's cgroups: so bwrap and everything it starts are in them from the
        // first. The run's variables are among those arguments (`--setenv`): never on a
        // command line another user could read, never in a file. The run's stdin is that
        // pipe, empty and closed.
        let mut bwrap = spec.argv.iter().cloned();
        let mut argv: Vec<String> = bwrap.next().into_iter().collect();
        argv.extend(["--args".to_owned(), "0".to_owned()]);
        argv.extend(bwrap);
        argv
    } else {
        // No sandbox: a shell puts itself in the cgroups, and `env -i` gives the run's
        // variables as its last step.
        let mut argv = launch_prefix(&cgroups.dirs());
        argv.extend(["/usr/bin/env".to_owned(), "-i".to_owned()]);
        argv.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        argv.extend(spec.argv.iter().cloned());
        argv
    };
    let (Ok(out), Ok(err)) = (log.try_clone(), log.try_clone()) else {
        return early_end(spec, "the log could not be shared with the run".to_owned());
    };
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env_clear()
        .envs(LAUNCH_ENV)
        .current_dir(&spec.cwd)
        .stdin(if sandboxed {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    // No pids cgroup: the run's tasks are held by RLIMIT_NPROC in its own user namespace,
    // where it counts the run's alone (without a sandbox it would count every process of
    // this user, the server's too, so there is no task limit then: said).
    if cgroups.pids.is_none() {
        if sandboxed && crate::sandbox::own_user_namespace() {
            sys::limit_tasks(&mut command, tasks);
        } else if sandboxed {
            // (An unsandboxed run's first lines say it has no sandbox, and so no such limit.)
            let _ = writeln!(
                log,
                "div: no task limit: neither a pids cgroup nor a user namespace of its own holds this run's processes"
            );
        }
    }
    // A sandboxed run goes in its cgroups before it can start anything: born in the v1
    // ones (this thread enters them to start it), moved into a v2 one while bwrap waits for
    // its arguments. (Unsandboxed, the launch shell moves itself in before it execs.)
    let entered = if sandboxed {
        cgroups.enter_v1()
    } else {
        Ok(())
    };
    let contained = sandboxed && entered.is_ok() && !cgroups.dirs().is_empty();
    let spawned = match entered {
        Ok(()) => command.spawn(),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("it could not be put in its cgroups: {e}"),
        )),
    };
    if sandboxed && let Err(e) = cgroups.leave_v1() {
        let _ = writeln!(
            log,
            "div: the supervisor could not leave the run's cgroups: {e}"
        );
    }
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = writeln!(log, "div: the run could not start: {e}");
            cgroups.remove();
            return early_end(spec, format!("the run could not start: {e}"));
        }
    };
    if let Some(mut pipe) = child.stdin.take() {
        if let Err(e) = cgroups.attach_v2(child.id()) {
            drop(pipe);
            let _ = kill_tree(&mut child, &cgroups, false);
            let _ = writeln!(log, "div: the run could not be put in its cgroups: {e}");
            cgroups.remove();
            return early_end(
                spec,
                format!("the run could not be put in its cgroups: {e}"),
            );
        }
        // Written from a thread: bwrap reads it whole at its start, but a pipe holds only
        // 64 KiB, and a bwrap that failed first never reads it (the write then fails).
        let args = env_args(&spec.env);
        std::thread::spawn(move || {
            let _ = pipe.write_all(&args);
        });
    }
    let stop_file = run_dir.join(STOP_FILE);
    let grace = spec.stop_grace_seconds;
    let ceiling_at = Limit::ceiling(spec.cents_per_hour, spec.max_spend_cents, grace);
    let day_at = Limit::new(spec.max_seconds, grace);
    let mut last_poll = std::time::Instant::now();
    let mut last_measured = std::time::Instant::now();
    // A disk that is not a filesystem of its own is measured, every few seconds.
    let measured = disk.as_ref().filter(|d| !d.own_filesystem).map(|d| d.bytes);
    let exit = sys::ExitWatch::new(child.id());
    // A node of several says it is well from the first, and decides no limit of its own.
    let node = spec.node.as_ref();
    let mut slurmd_gone_said = false;
    let mut last_beat = std::time::Instant::now();
    if let Some(node) = node {
        node.beat(&mut log, &mut slurmd_gone_said);
    }
    let stopped = loop {
        // Not reaped here: see `sys::child_exited`.
        match sys::child_exited(child.id()) {
            Ok(true) => break Stopped::Exited,
            Ok(false) => {}
            Err(_) => break Stopped::Canceled,
        }
        let elapsed = now_ms().saturating_sub(spec.started_ms);
        // Stopped by the org: the server wrote why (`org::STOP_FILE`) before asking the stop.
        // (An empty one is still being written by an older server: the next look reads it.)
        if let Ok(reason) = fs::read_to_string(run_dir.join(ORG_STOP_FILE))
            && !reason.trim().is_empty()
        {
            break Stopped::Org(reason.trim().chars().take(200).collect());
        }
        if let Some(node) = node {
            if let Some(decided) = decision::read(&node.run_dir) {
                break Stopped::Decided(decided);
            }
            if last_beat.elapsed() >= HEARTBEAT {
                last_beat = std::time::Instant::now();
                node.beat(&mut log, &mut slurmd_gone_said);
            }
        }
        if sys::stop_requested() || stop_file.exists() {
            break Stopped::Canceled;
        }
        // Near the ceiling or the time limit: told while what is left still buys the grace.
        // (A node of several is told by the control plane's decision instead.)
        if let Some(at) = ceiling_at
            && node.is_none()
            && elapsed >= at.told_ms
        {
            break Stopped::Ceiling;
        }
        if node.is_none() && elapsed >= day_at.told_ms {
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
            // Its run directory gone (its state directory removed) or another in its place:
            // nothing of the run can be written any more, so it is ended at once.
            if !same_dir(run_dir, own_dir) {
                break Stopped::Gone;
            }
        }
        if let Some(bytes) = measured
            && last_measured.elapsed() >= DISK_MEASURED_EVERY
        {
            last_measured = std::time::Instant::now();
            if crate::scratch::used(&places) > bytes {
                break Stopped::DiskLimit(bytes);
            }
        }
        // Woken at once when the run exits.
        exit.wait(Duration::from_millis(20));
    };
    // Told to stop: SIGTERM to the run's own processes first, then SIGKILL to whatever is
    // left when its grace is over (at the ceiling or the time limit, at that very second).
    let kill_at_ms = match &stopped {
        Stopped::Canceled | Stopped::Org(_) => Some(
            now_ms()
                .saturating_sub(spec.started_ms)
                .saturating_add(grace.saturating_mul(1000)),
        ),
        Stopped::Ceiling => ceiling_at.map(|at| at.limit_ms),
        Stopped::Day => Some(day_at.limit_ms),
        // The decision's moment is the same on every node: as ms since this run's start.
        Stopped::Decided(d) => Some(d.kill_at_ms.saturating_sub(spec.started_ms)),
        Stopped::Exited
        | Stopped::Memory
        | Stopped::DiskFull
        | Stopped::Gone
        | Stopped::DiskLimit(_) => None,
    };
    let mut killed_in_grace_for_memory = false;
    if let Some(kill_at_ms) = kill_at_ms {
        let left = kill_at_ms.saturating_sub(now_ms().saturating_sub(spec.started_ms));
        let line = match &stopped {
            Stopped::Ceiling => decision::told_line(
                &decision::ceiling_words(spec.max_spend_cents.unwrap_or_default(), left),
                left,
            ),
            Stopped::Day => decision::told_line(
                &decision::time_limit_line_words(spec.max_seconds, left),
                left,
            ),
            Stopped::Decided(d) => d.line.clone(),
            _ => decision::told_line(decision::ASKED_WORDS, left),
        };
        let _ = writeln!(log, "{line}");
        // Each of the run's processes is told once, those it starts during the grace too: a
        // stop that came before the command itself had started reaches it once it does.
        // Under div-init, it is told and it tells them, and the sandbox stays until they
        // have all exited; it is told again now and then, which it takes as the same stop,
        // in case the first came before it was ready to hear it.
        let mut told = BTreeSet::new();
        let init = spec.init.as_deref().map(|host| {
            if sandboxed {
                Path::new(crate::init::IN_SANDBOX)
            } else {
                host
            }
        });
        let mut told_init = std::time::Instant::now();
        match init {
            Some(init) => tell_init(child.id(), sandboxed, init),
            None => terminate(child.id(), sandboxed, &mut told),
        }
        while sys::child_exited(child.id()).is_ok_and(|exited| !exited)
            && now_ms().saturating_sub(spec.started_ms) < kill_at_ms
        {
            exit.wait(Duration::from_millis(20));
            if let Some(node) = node
                && last_beat.elapsed() >= HEARTBEAT
            {
                last_beat = std::time::Instant::now();
                node.beat(&mut log, &mut slurmd_gone_said);
            }
            match init {
                Some(init) if told_init.elapsed() >= Duration::from_millis(100) => {
                    told_init = std::time::Instant::now();
                    tell_init(child.id(), sandboxed, init);
                }
                Some(_) => {}
                None => terminate(child.id(), sandboxed, &mut told),
            }
            // Held to its memory during its grace too: where no cgroup holds it, a handler
            // that grows past it is killed now, as the kernel would.
            if cgroups.memory.is_none() && last_poll.elapsed() >= Duration::from_millis(50) {
                last_poll = std::time::Instant::now();
                if tree_rss(child.id()) > spec.memory_bytes {
                    killed_in_grace_for_memory = true;
                    break;
                }
            }
        }
    }
    let status = kill_tree(&mut child, &cgroups, contained);
    if matches!(stopped, Stopped::Gone) {
        // Nowhere to write its end: what it held is let go, and nothing more is done.
        cgroups.remove();
        crate::scratch::remove(run_dir, &on_disk);
        return early_end(spec, "the run's directory is gone".to_owned());
    }
    // Killed for its memory while it was stopping (the stop is still why it ended): said, so
    // that a result its handler never wrote is not a mystery.
    if kill_at_ms.is_some() && (killed_in_grace_for_memory || cgroups.oom_killed()) {
        let _ = writeln!(
            log,
            "div: the run was killed for its memory ({} GiB) during its grace, before it had exited",
            spec.memory_bytes >> 30
        );
    }
    if let Stopped::Org(why) = &stopped {
        let _ = writeln!(log, "div: stopped by the org: {why}");
    }
    let ended_ms = now_ms();
    let oom = matches!(stopped, Stopped::Memory) || cgroups.oom_killed();
    cgroups.remove();
    let elapsed_ms = ended_ms.saturating_sub(spec.started_ms);
    let duration_seconds = elapsed_ms / 1000;
    // Billed to its end, or (a lost node's decision) to the moment the run was found lost.
    let billed_ms = match &stopped {
        Stopped::Decided(Decision {
            spend_until_ms: Some(until),
            ..
        }) => (*until).min(ended_ms).saturating_sub(spec.started_ms),
        _ => elapsed_ms,
    };
    let spent = rules::charge(spec.cents_per_hour, billed_ms / 1000, spec.max_spend_cents);
    // A run that exited (often failing) as its log filled the disk says so too.
    let stopped = match stopped {
        Stopped::Exited
            if !status.as_ref().is_ok_and(|s| s.success()) && sys::disk_full(&log_path) =>
        {
            Stopped::DiskFull
        }
        other => other,
    };
    let (mut status, exit_code, mut reason) = match stopped {
        Stopped::DiskFull => (RunStatus::Failed, None, Some(DISK_FULL_REASON.to_owned())),
        Stopped::Exited => {
            let code = status.map_or(1, exit_code_of);
            if code == 0 {
                (RunStatus::Succeeded, Some(0), None)
            } else {
                (RunStatus::Failed, Some(code), None)
            }
        }
        Stopped::Canceled => (RunStatus::Canceled, None, None),
        Stopped::Org(ref why) => (RunStatus::StoppedByOrg, None, Some(why.clone())),
        Stopped::Ceiling => (RunStatus::HitCeiling, None, None),
        Stopped::Day => (
            RunStatus::Failed,
            None,
            Some(decision::time_limit_reason(spec.max_seconds)),
        ),
        Stopped::Memory => (RunStatus::Failed, Some(137), Some(OOM_REASON.to_owned())),
        Stopped::Decided(ref d) => {
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
    let mut exit_code = exit_code;
    if oom
        && !matches!(
            stopped,
            Stopped::Canceled
                | Stopped::Org(_)
                | Stopped::Ceiling
                | Stopped::Day
                | Stopped::DiskFull
                | Stopped::Decided(_)
                | Stopped::Gone
                | Stopped::DiskLimit(_)
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
    // Off `/workspace` first (in this supervisor's own namespace), so what is deleted next
    // is the layers themselves, not the merged view; then the run's own disk goes whole.
    if overlay.is_some() {
        let _ = sys::unmount(&spec.workspace);
    }
    if own_disk {
        crate::scratch::remove(run_dir, &on_disk);
    }
    if let Some(layers) = &spec.overlay {
        layers.remove();
    }
    let _ = fs::remove_dir_all(&spec.workspace);
    // The run's `/tmp` and its own `/mnt` go with it, as `/workspace` does: what it left
    // there was read above (its result and telemetry are kept beside its log).
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

/// The program and arguments put before an unsandboxed run's own: a shell that moves itself
/// into each cgroup in `dirs` and becomes the command, so the run is in its cgroups before it
/// execs, and the supervisor stays outside them. It runs with [`LAUNCH_ENV`], never the run's
/// variables. (A sandboxed run needs none: bubblewrap waits for its arguments, and the
/// supervisor puts it in the cgroups meanwhile.)
fn launch_prefix(dirs: &[PathBuf]) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || exit 125; shift; done; shift; exec \"$@\""
            .to_owned(),
        "sh".to_owned(),
    ];
    argv.extend(
        dirs.iter()
            .map(|d| d.join("cgroup.procs").display().to_string()),
    );
    argv.push("--".to_owned());
    argv
}

/// bwrap's `--args` input: `--clearenv`, then `--setenv KEY VALUE` for each variable, each
/// argument ended by a NUL (the server refuses a variable holding one).
fn env_args(env: &[(String, String)]) -> Vec<u8> {
    let mut out = b"--clearenv\0".to_vec();
    for (k, v) in env {
        for part in ["--setenv", k.as_str(), v.as_str()] {
            out.extend(part.bytes().filter(|b| *b != 0));
            out.push(0);
        }
    }
    out
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
            secrets_at: None,
            secrets_file: None,
            first_lines: Vec::new(),
            cores: Vec::new(),
            memory_bytes: 1 << 40,
            cgroups: Plan::default(),
            cents_per_hour: 0,
            max_spend_cents: None,
            max_seconds,
            stop_grace_seconds: 0,
            started_ms: now_ms(),
            checks: Vec::new(),
            result_path: tmp.join("divergent/result.json"),
            telemetry_path: tmp.join("divergent/telemetry.jsonl"),
            mnt_dir: None,
            volumes: Vec::new(),
            workspace,
            overlay: None,
            python_shim: None,
            init: None,
            node: None,
            tasks: None,
            disk: None,
        }
    }

    /// A run's lock held a moment by another open of it (as a process the server forks holds
    /// the server's until its `exec`) is waited for, not given way to; held past the patience
    /// (another supervisor, for its life), it is.
    #[test]
    fn a_lock_held_a_moment_is_waited_for_and_one_held_on_is_given_way_to() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let held = claim(dir.path()).expect("a lock file").expect("free");
        let let_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            drop(held);
        });
        let got = claim_waiting(dir.path(), std::time::Duration::from_secs(5));
        let_go.join().expect("no panic");
        let mine = got.expect("not given way").expect("a lock");
        // Now held on: a second supervisor gives way once its patience is spent.
        assert!(claim_waiting(dir.path(), std::time::Duration::from_millis(50)).is_none());
        drop(mine);
    }

    #[test]
    fn a_run_past_its_time_limit_is_stopped_with_the_day_reason() {
        // The limit is spec.json's `max_seconds` (the server writes 24 hours); 1 s here.
        let dir = tempfile::tempdir().expect("a temp dir");
        let marker = dir.path().join("child-pid");
        let command = format!("sleep 1000 & echo $! > {}; sleep 1000", marker.display());
        let end = run(dir.path(), &spec(dir.path(), &command, 1));
        assert_eq!(end.status, RunStatus::Failed);
        assert_eq!(
            end.reason.as_deref(),
            Some("reached this machine's time limit of 1 s (max_run_seconds)")
        );
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
    fn a_run_near_its_time_limit_gets_sigterm_and_its_grace_to_write_its_result() {
        // Limit 4 s, grace 2 s: SIGTERM at 2 s. The run traps it, writes its result and
        // exits; its check is judged on that result.
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut spec = spec(
            dir.path(),
            "trap 'echo \"{\\\"epoch\\\": 18}\" > \"$R\"; echo saved; exit 0' TERM; echo started; while :; do sleep 0.05; done",
            4,
        );
        spec.stop_grace_seconds = 2;
        spec.env
            .push(("R".to_owned(), spec.result_path.display().to_string()));
        spec.checks = vec!["epoch>=18".to_owned()];
        let end = run(dir.path(), &spec);
        assert_eq!(end.status, RunStatus::Failed);
        assert_eq!(
            end.reason.as_deref(),
            Some("reached this machine's time limit of 4 s (max_run_seconds)")
        );
        assert_eq!(end.verdicts[0].line, "check passed: epoch >= 18 (found 18)");
        assert!((2..4).contains(&end.duration_seconds), "{end:?}");
        let log = fs::read_to_string(dir.path().join("log")).expect("a log");
        // (The shell may say `Terminated` for its `sleep`, which got the SIGTERM too.)
        assert!(
            log.starts_with("started\ndiv: its time limit of 4 s (max_run_seconds) is 2 s away: SIGTERM sent to the run; SIGKILL in 2 s if it has not exited\n"),
            "{log}"
        );
        assert!(log.contains("\nsaved\n"), "{log}");
    }

    #[test]
    fn an_org_stop_file_still_empty_is_not_taken_for_a_stop_with_no_reason() {
        // What a supervisor met when the server wrote the file in place: it exists, empty,
        // for a moment. The run goes on until the reason is there, then stops with it.
        let dir = tempfile::tempdir().expect("a temp dir");
        let said = dir.path().join(ORG_STOP_FILE);
        fs::write(&said, b"").expect("an empty stop file");
        let writer = {
            let said = said.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                fs::write(&said, "org usage limit of $0.01 reached\n").expect("the reason");
            })
        };
        let end = run(dir.path(), &spec(dir.path(), "echo going; sleep 30", 60));
        writer.join().expect("the writer");
        assert_eq!(end.status, RunStatus::StoppedByOrg, "{end:?}");
        assert_eq!(
            end.reason.as_deref(),
            Some("org usage limit of $0.01 reached")
        );
    }

    #[test]
    fn a_run_that_ignores_sigterm_is_killed_when_its_grace_is_over() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut spec = spec(dir.path(), "trap '' TERM; echo started; sleep 1000", 2);
        spec.stop_grace_seconds = 1;
        let end = run(dir.path(), &spec);
        assert_eq!(end.status, RunStatus::Failed);
        assert_eq!(
            end.duration_seconds, 2,
            "killed at the limit itself: {end:?}"
        );
        let log = fs::read_to_string(dir.path().join("log")).expect("a log");
        assert!(log.contains("SIGKILL in 1 s"), "{log}");
    }

    /// A stop that comes before the command has started (here, as under bubblewrap, the
    /// first two processes are the sandbox's own and are never told) still reaches the
    /// command once it starts, once, and within its grace.
    #[test]
    fn a_process_started_after_the_stop_is_told_once_during_the_grace() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let got = dir.path().join("got");
        // Started with SIGTERM blocked, so that a SIGTERM sent before its handler is in place
        // waits for it rather than killing it: then it counts what it is told.
        let late = format!(
            "import signal, time\n\
             def on(*_):\n    open('{got}', 'a').write('term\\n')\n\
             signal.signal(signal.SIGTERM, on)\n\
             open('{got}.started', 'w').close()\n\
             signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])\n\
             end = time.time() + 1.5\n\
             while time.time() < end: time.sleep(0.01)\n",
            got = got.display()
        );
        // The sandbox's own two (never told): a shell, and its child, which starts the late
        // process 0.3 s after the stop.
        let middle = "import os, signal, sys, time\n\
                      time.sleep(0.3)\n\
                      signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])\n\
                      pid = os.fork()\n\
                      if pid == 0: os.execv('/usr/bin/python3', ['python3', '-c', sys.argv[1]])\n\
                      os.waitpid(pid, 0)\n";
        let mut child = Command::new("sh")
            .args([
                "-c",
                "/usr/bin/python3 -c \"$0\" \"$1\"; wait",
                middle,
                &late,
            ])
            .spawn()
            .expect("sh");
        std::thread::sleep(Duration::from_millis(50));
        let mut told = BTreeSet::new();
        terminate(child.id(), true, &mut told);
        assert!(told.is_empty(), "the sandbox's own were told: {told:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !got.with_extension("started").exists() && std::time::Instant::now() < deadline {
            terminate(child.id(), true, &mut told);
            std::thread::sleep(Duration::from_millis(20));
        }
        // Looked at again for a while after it started: told once, not each time.
        for _ in 0..20 {
            terminate(child.id(), true, &mut told);
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.wait();
        assert_eq!(
            fs::read_to_string(&got).unwrap_or_default(),
            "term\n",
            "told {told:?}"
        );
    }

    #[test]
    fn the_runs_variables_are_bwrap_arguments_each_ended_by_a_nul() {
        let env = vec![
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "x y\nz".to_owned()),
        ];
        assert_eq!(
            env_args(&env),
            b"--clearenv\0--setenv\0A\0\x31\0--setenv\0B\0x y\nz\0".to_vec()
        );
    }

    /// A node of a run of several decides no limit of its own (its ceiling here is reached
    /// at once), says it is well, and ends as the control plane's decision says, with the
    /// decision's line, at the decision's moment: told, its handler runs.
    #[test]
    fn a_node_obeys_the_decision_for_the_whole_run_and_no_limit_of_its_own() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let run_dir = dir.path().join("run");
        let node_dir = dir.path().join("node");
        fs::create_dir_all(&run_dir).expect("run dir");
        fs::create_dir_all(&node_dir).expect("node dir");
        let mut spec = spec(
            &node_dir,
            "trap 'echo told; exit 0' TERM; echo started; while :; do sleep 0.05; done",
            3600,
        );
        spec.cents_per_hour = 1_000_000;
        spec.max_spend_cents = Some(1);
        spec.stop_grace_seconds = 5;
        spec.node = Some(NodeDuties {
            run_dir: run_dir.clone(),
            heartbeat: node_dir.join("alive"),
            slurmd_pid_file: None,
        });
        let log = node_dir.join("log");
        let decider = {
            let run_dir = run_dir.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                while !fs::read_to_string(&log).is_ok_and(|l| l.contains("started\n")) {
                    assert!(std::time::Instant::now() < deadline, "never started");
                    std::thread::sleep(Duration::from_millis(20));
                }
                let now = now_ms();
                decision::decide(
                    &run_dir,
                    &Decision {
                        why: decision::Why::Canceled,
                        reason: None,
                        line: "div: decided for the whole run".to_owned(),
                        decided_ms: now,
                        kill_at_ms: now + 5_000,
                        spend_until_ms: None,
                    },
                )
                .expect("decided");
            })
        };
        let end = run(&node_dir, &spec);
        decider.join().expect("the decider");
        assert_eq!(end.status, RunStatus::Canceled, "{end:?}");
        let log = fs::read_to_string(node_dir.join("log")).expect("a log");
        assert!(
            log.contains("started\ndiv: decided for the whole run\n") && log.contains("told\n"),
            "{log}"
        );
        assert!(
            fs::read_to_string(node_dir.join("alive")).is_ok_and(|t| t.parse::<u64>().is_ok()),
            "no heartbeat"
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
