//! Runs: placing (validation, idempotency), scheduling on free GPUs and cores, launching
//! supervisors, watching for their `end.json`, stopping, and reconciling after a restart.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use div_api::{CreateRun, Run, RunStatus};
use serde_json::{Value, json};

use crate::SupervisorCommand;
use crate::cgroup;
use crate::deps;
use crate::inventory::Inventory;
use crate::sandbox::{self, SandboxInput};
use crate::store::{Placed, RunInternal, RunRecord, Store, StoreError};
use crate::supervisor::{self, EndRecord, RunSpec};
use crate::sys;

/// The image a run is said to have when it names none (locally the host is the image).
pub(crate) const DEFAULT_IMAGE: &str = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime";
/// The reason of a run whose supervisor vanished without writing its end.
pub(crate) const LOST_REASON: &str = "the supervisor was lost";

/// Everything the server shares between requests and the scheduler.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) home: PathBuf,
    pub(crate) store: Store,
    pub(crate) inventory: Inventory,
    pub(crate) sandboxed: bool,
    pub(crate) supervisor: SupervisorCommand,
    /// Where runs' memory and CPU cgroups go (found once, at start).
    pub(crate) cgroups: cgroup::Plan,
    /// Serializes changes of runs' status between handlers and the scheduler.
    pub(crate) lock: Mutex<()>,
    /// One lock per blob being uploaded (volume, hash): uploads of one blob take turns, so
    /// their bytes never mix in its partial file.
    pub(crate) uploads: crate::volumes::UploadLocks,
    /// Wakes the scheduler before its next tick: a run was placed, or one has ended.
    pub(crate) kick: tokio::sync::Notify,
}

/// A refusal or failure, as the API's error body.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: u16,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) details: Value,
}

impl Failure {
    pub(crate) fn new(status: u16, code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            status,
            code,
            message: message.into(),
            details: Value::Null,
        }
    }
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(422, "invalid", message)
    }
    pub(crate) fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(404, "not_found", message)
    }
    pub(crate) fn with_details(mut self, details: Value) -> Failure {
        self.details = details;
        self
    }
}

/// The message of a refusal because the control plane's disk is full.
pub(crate) const DISK_FULL: &str = "no space left on the control plane's disk";

impl Failure {
    /// 507 `insufficient_storage`: the disk under the control plane's home is full.
    pub(crate) fn disk_full(what: &str) -> Failure {
        Failure::new(
            507,
            "insufficient_storage",
            format!("{DISK_FULL} while {what}; free some space and try again"),
        )
    }
}

fn sqlite_full(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
            if f.code == rusqlite::ErrorCode::DiskFull
    )
}

/// Whether an I/O error says the disk (or the user's quota on it) is full.
pub(crate) fn io_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        if sqlite_full(&e) {
            return Failure::disk_full("writing the state database");
        }
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        Failure::new(500, "internal", message)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        if io_full(&e) {
            return Failure::disk_full("writing the state directory");
        }
        Failure::new(500, "internal", format!("the state directory failed: {e}"))
    }
}

impl State {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn run_dir(&self, id: &str) -> PathBuf {
        self.home.join("runs").join(id)
    }
    pub(crate) fn volume_dir(&self, name: &str) -> PathBuf {
        self.home.join("volumes").join(name)
    }
}

pub(crate) fn now_rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Random lowercase base36 characters, from the kernel's generator.
fn random_base36(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_err()
    {
        let seed = blake3::hash(
            format!("{:?}{}", std::time::SystemTime::now(), std::process::id()).as_bytes(),
        );
        bytes.copy_from_slice(&seed.as_bytes()[..n.min(32)]);
    }
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % 36] as char)
        .collect()
}

fn valid_run_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && !name.starts_with("r_")
}

fn valid_env_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `POST /v1/runs`: 201 and the new run, 200 and the same run for a retry.
pub(crate) fn create_run(state: &State, key: &str, body: &[u8]) -> Result<(u16, Run), Failure> {
    if key.is_empty() {
        return Err(Failure::new(
            400,
            "invalid",
            "the `Idempotency-Key` header is required",
        ));
    }
    let request: CreateRun = serde_json::from_slice(body)
        .map_err(|e| Failure::new(400, "invalid", format!("the run is not valid JSON: {e}")))?;
    let canonical = serde_json::to_vec(&request).map_err(|e| Failure::invalid(e.to_string()))?;
    let body_hash = blake3::hash(&canonical).to_hex().to_string();

    let accepted = state.inventory.accepted();
    let sku = deps::sku(&request.sku)
        .filter(|s| accepted.iter().any(|a| a == s.name))
        .ok_or_else(|| {
            Failure::new(
                422,
                "unknown_sku",
                format!(
                    "unknown SKU `{}`; this machine takes {}",
                    request.sku,
                    accepted.join(", ")
                ),
            )
            .with_details(json!({ "accepted": accepted }))
        })?;
    let sizing = deps::size(&sku, request.gpus, request.cpu, request.memory_gib)
        .map_err(Failure::invalid)?;
    let gpus = if sku.gpu { request.gpus } else { 0 };
    if let Some(group) = state.inventory.group(sku.name) {
        let have = group.indices.len() as u32;
        if gpus > have {
            return Err(Failure::invalid(format!(
                "this machine has {have} {}; the run asks for {gpus}",
                sku.label
            )));
        }
    }
    let host = state.inventory.host_cores;
    if sizing.cores > host {
        return Err(Failure::invalid(format!(
            "this machine has {host} cores; the run asks for {}",
            sizing.cores
        ))
        .with_details(json!({ "cores": host })));
    }
    if let Some(cents) = request.max_spend_cents
        && cents <= 0
    {
        return Err(Failure::invalid(format!(
            "`max_spend_cents` must be more than 0, not `{cents}`"
        )));
    }
    let checks = request
        .checks
        .iter()
        .map(|c| deps::parse_check(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::invalid)?;
    if let Some(bad) = request.env.iter().find(|e| !valid_env_key(&e.key)) {
        return Err(Failure::invalid(format!(
            "`{}` is not an environment variable name",
            bad.key
        )));
    }
    if let Some(problem) = request
        .env
        .iter()
        .find_map(|e| sandbox::env_value_problem("environment variable", &e.key, &e.value))
    {
        return Err(Failure::invalid(problem));
    }
    if request.project.trim().is_empty() {
        return Err(Failure::invalid("the run has no project"));
    }
    if let Some(name) = &request.name
        && !valid_run_name(name)
    {
        return Err(Failure::invalid(format!(
            "`{name}` is not a run name; use lowercase letters, digits and `-`"
        )));
    }
    if let Some(code) = &request.code {
        let dir = state.volume_dir(&code.volume).join(&code.path);
        if state.store.volume(&code.volume)?.is_none()
            || code
                .path
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
            || !dir.is_dir()
        {
            return Err(Failure::invalid(format!(
                "the code `{}/{}` is not in a volume",
                code.volume, code.path
            )));
        }
    }

    let _guard = state.lock();
    let name = match &request.name {
        Some(name) => name.clone(),
        None => loop {
            let name = format!("run-{}", random_base36(4));
            if !state.store.name_taken(&name)? {
                break name;
            }
        },
    };
    let now = supervisor::now_ms();
    let run = Run {
        id: format!("r_{}", random_base36(16)),
        name: name.clone(),
        project: request.project.clone(),
        status: RunStatus::Queued,
        entrypoint: request.entrypoint.clone(),
        command: request.command.clone(),
        sku: sku.name.to_owned(),
        gpus,
        cores: sizing.cores,
        memory_gib: sizing.memory_gib,
        cents_per_hour: sizing.cents_per_hour,
        max_spend_cents: request.max_spend_cents,
        spent_cents: 0,
        image: request
            .image
            .clone()
            .unwrap_or_else(|| DEFAULT_IMAGE.to_owned()),
        env: request.env.clone(),
        checks,
        verdicts: Vec::new(),
        exit_code: None,
        reason: None,
        code: request.code.clone(),
        telemetry_layout: request.telemetry_layout.clone(),
        created_at: now_rfc3339(now),
        started_at: None,
        ended_at: None,
        duration_seconds: 0,
        log_bytes: 0,
        extra: Default::default(),
    };
    let record = RunRecord {
        run,
        internal: RunInternal::default(),
    };
    let placed = match state.store.place_run(key, &body_hash, &record) {
        Ok(placed) => placed,
        Err(StoreError::Sqlite(e)) if e.to_string().contains("UNIQUE") => {
            return Err(Failure::new(
                409,
                "conflict",
                format!("a run named `{name}` already exists"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    match placed {
        Placed::New => {
            // A volume the command names is made before the run is queued.
            for volume in deps::volumes_named(&record.run.command) {
                if state.store.create_volume(&volume, &now_rfc3339(now))? {
                    fs::create_dir_all(state.volume_dir(&volume))?;
                }
            }
            Ok((201, view(state, &record)))
        }
        Placed::Again(existing) => Ok((200, view(state, &existing))),
        Placed::Conflict => Err(Failure::new(
            409,
            "conflict",
            format!("the idempotency key `{key}` was used for another run"),
        )),
    }
}

/// The run as the API shows it: spend and duration live while it runs, the log's size.
pub(crate) fn view(state: &State, record: &RunRecord) -> Run {
    let mut run = record.run.clone();
    run.log_bytes = fs::metadata(state.run_dir(&run.id).join("log")).map_or(0, |m| m.len());
    if run.status == RunStatus::Running
        && let Some(started) = record.internal.started_ms
    {
        let seconds = supervisor::now_ms().saturating_sub(started) / 1000;
        run.duration_seconds = seconds;
        run.spent_cents = deps::charge(run.cents_per_hour, seconds, run.max_spend_cents);
    }
    run
}

/// A run by id or name, as the API shows it.
pub(crate) fn get_run(state: &State, id_or_name: &str) -> Result<(Run, RunRecord), Failure> {
    let record = state
        .store
        .get_run(id_or_name)?
        .ok_or_else(|| Failure::not_found(format!("no run `{id_or_name}`")))?;
    Ok((view(state, &record), record))
}

/// Asks a run to stop: a queued one is canceled at once; a running one's supervisor is told
/// (a `stop` file and SIGTERM) and kills its whole tree. Returns whether it was running.
pub(crate) fn request_stop(state: &State, id_or_name: &str) -> Result<bool, Failure> {
    let _guard = state.lock();
    let mut record = state
        .store
        .get_run(id_or_name)?
        .ok_or_else(|| Failure::not_found(format!("no run `{id_or_name}`")))?;
    match record.run.status {
        RunStatus::Queued => {
            let now = supervisor::now_ms();
            record.run.status = RunStatus::Canceled;
            record.run.ended_at = Some(now_rfc3339(now));
            state.store.update_run(&record)?;
            Ok(false)
        }
        RunStatus::Running => {
            let dir = state.run_dir(&record.run.id);
            // The supervisor looks for this file every 20 ms. No signal is sent: one that
            // arrived between the supervisor's exec and its handler being installed would
            // kill it before it wrote the run's end, and the run would read as lost.
            fs::write(dir.join("stop"), b"")?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Whether `pid` is the live supervisor of the run in `run_dir` (not a reused pid, not a
/// zombie).
fn supervisor_alive(pid: u32, run_dir: &Path) -> bool {
    if !sys::alive(pid) {
        return false;
    }
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest.trim_start());
    // A zombie, or a kernel thread (a child of kthreadd, pid 2) that got the pid.
    if rest.starts_with('Z') || rest.split_whitespace().nth(1) == Some("2") {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    // A supervisor just spawned can still be inside its exec: the kernel lets the spawner go
    // on once the new program's memory is in place, but fills in its arguments only after, so
    // its cmdline reads empty meanwhile. Under load that lasted past the next tick, and the
    // run was recorded as "the supervisor was lost" while its supervisor went on. Not known
    // yet, so alive: the next tick looks again.
    if cmdline.is_empty() {
        return true;
    }
    let needle = run_dir.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == needle)
}

/// One pass of the scheduler: record runs that ended (or whose supervisor was lost), then
/// start queued runs, in order, while their GPUs and cores are free. Also the reconciliation
/// on start.
pub(crate) fn tick(state: &State) -> Result<bool, StoreError> {
    let _guard = state.lock();
    let mut changed = false;
    let mut running = Vec::new();
    for record in state.store.runs_with_status(RunStatus::Running)? {
        match check_running(state, record)? {
            Some(still) => running.push(still),
            None => changed = true,
        }
    }
    let mut busy_cores: BTreeSet<usize> = BTreeSet::new();
    let mut busy_gpus: BTreeSet<(String, u32)> = BTreeSet::new();
    for r in &running {
        busy_cores.extend(r.internal.cores.iter().copied());
        busy_gpus.extend(r.internal.gpus.iter().map(|g| (r.run.sku.clone(), *g)));
    }
    for mut record in state.store.runs_with_status(RunStatus::Queued)? {
        let free_cores: Vec<usize> = (0..state.inventory.host_cores as usize)
            .filter(|c| !busy_cores.contains(c))
            .collect();
        let need_cores = record.run.cores as usize;
        let free_gpus: Vec<u32> = state
            .inventory
            .group(&record.run.sku)
            .map(|g| {
                g.indices
                    .iter()
                    .copied()
                    .filter(|i| !busy_gpus.contains(&(record.run.sku.clone(), *i)))
                    .collect()
            })
            .unwrap_or_default();
        let need_gpus = record.run.gpus as usize;
        // Strictly in order: a run that does not fit holds the ones behind it.
        if free_cores.len() < need_cores || free_gpus.len() < need_gpus {
            break;
        }
        let cores: Vec<usize> = free_cores[..need_cores].to_vec();
        let gpus: Vec<u32> = free_gpus[..need_gpus].to_vec();
        changed = true;
        match launch(state, &mut record, &cores, &gpus) {
            Ok(()) => {
                busy_cores.extend(cores);
                busy_gpus.extend(gpus.into_iter().map(|g| (record.run.sku.clone(), g)));
            }
            Err(e) => {
                let now = supervisor::now_ms();
                record.run.status = RunStatus::Failed;
                record.run.reason = Some(format!("the run could not start: {e}"));
                record.run.ended_at = Some(now_rfc3339(now));
                state.store.update_run(&record)?;
            }
        }
    }
    Ok(changed)
}

/// Records the end of a running run when it has one; `Some` while it goes on.
fn check_running(state: &State, mut record: RunRecord) -> Result<Option<RunRecord>, StoreError> {
    let dir = state.run_dir(&record.run.id);
    let end_path = dir.join("end.json");
    // The supervisor writes its end atomically, so one that is there but does not parse was
    // damaged afterwards: it is said to be unreadable, never read as "the supervisor was lost".
    let read_end = || -> Option<EndRecord> {
        let bytes = fs::read(&end_path).ok()?;
        Some(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            supervisor::unreadable_end(&bytes, &e.to_string(), &record.run, &record.internal)
        }))
    };
    let end = match read_end() {
        Some(end) => Some(end),
        None => {
            let alive = record
                .internal
                .pid
                .is_some_and(|pid| supervisor_alive(pid, &dir));
            if alive {
                None
            } else {
                // It may have written its end just after the first look.
                match read_end() {
                    Some(end) => Some(end),
                    None => {
                        // What the run left in its cgroups goes with it: no orphan survives.
                        let left = cgroup::RunCgroups::left_by(&state.cgroups, &record.run.id);
                        for pid in left.pids() {
                            sys::kill(pid, libc::SIGKILL);
                        }
                        left.remove();
                        let now = supervisor::now_ms();
                        let started = record.internal.started_ms.unwrap_or(now);
                        let seconds = now.saturating_sub(started) / 1000;
                        let spent = deps::charge(
                            record.run.cents_per_hour,
                            seconds,
                            record.run.max_spend_cents,
                        );
                        Some(EndRecord {
                            status: RunStatus::Failed,
                            exit_code: None,
                            reason: Some(LOST_REASON.to_owned()),
                            started_ms: started,
                            ended_ms: now,
                            duration_seconds: seconds,
                            spent_cents: spent,
                            verdicts: Vec::new(),
                        })
                    }
                }
            }
        }
    };
    let Some(end) = end else {
        return Ok(Some(record));
    };
    let run = &mut record.run;
    run.status = end.status;
    run.exit_code = end.exit_code;
    run.reason = end.reason;
    run.started_at = Some(now_rfc3339(end.started_ms));
    run.ended_at = Some(now_rfc3339(end.ended_ms));
    run.duration_seconds = end.duration_seconds;
    run.spent_cents = end.spent_cents;
    run.verdicts = end.verdicts;
    run.log_bytes = fs::metadata(dir.join("log")).map_or(0, |m| m.len());
    state.store.update_run(&record)?;
    Ok(None)
}

/// Copies a tree: directories, files (copy_file_range through `fs::copy`) and links.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &dest)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

fn launch(
    state: &State,
    record: &mut RunRecord,
    cores: &[usize],
    gpus: &[u32],
) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let run = &record.run;
    let dir = state.run_dir(&run.id);
    fs::create_dir_all(&dir).map_err(io)?;
    let workspace = dir.join("workspace");
    let _ = fs::remove_dir_all(&workspace);
    match &run.code {
        Some(code) => {
            copy_tree(&state.volume_dir(&code.volume).join(&code.path), &workspace).map_err(io)?
        }
        None => fs::create_dir_all(&workspace).map_err(io)?,
    }
    let tmp = dir.join("tmp");
    fs::create_dir_all(tmp.join("divergent")).map_err(io)?;
    let mnt = dir.join("mnt");
    fs::create_dir_all(&mnt).map_err(io)?;
    let volumes: Vec<(String, PathBuf)> = state
        .store
        .volumes()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|v| {
            let path = state.volume_dir(&v.name);
            (v.name, path)
        })
        .collect();
    for (name, host) in &volumes {
        fs::create_dir_all(mnt.join(name)).map_err(io)?;
        fs::create_dir_all(host).map_err(io)?;
    }
    let sku = deps::sku(&run.sku).ok_or("unknown SKU")?;
    let mut first_lines = Vec::new();
    if sku.gpu && state.inventory.emulated {
        first_lines.push(format!(
            "div: emulated {} ×{} (DIVERGENT_EMULATE_GPUS): this run has no GPU",
            sku.label, run.gpus
        ));
    }
    if run.image != DEFAULT_IMAGE {
        first_lines.push(format!(
            "div: the image {} is not used here: the local control plane runs on this machine's own system",
            run.image
        ));
    }
    if !state.sandboxed {
        first_lines.push(
            "div: no sandbox (bubblewrap is missing or turned off): this run sees and can write this machine's files; /workspace and /tmp/divergent are directories under the state directory, and no volume is at /mnt".to_owned(),
        );
    }
    let (in_tmp, in_workspace) = if state.sandboxed {
        (PathBuf::from("/tmp"), PathBuf::from("/workspace"))
    } else {
        (tmp.clone(), workspace.clone())
    };
    // Environment, later entries win: a sane base, then runtime.md's table in order.
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("LANG".into(), "C.UTF-8".into()),
        ("HOME".into(), in_tmp.display().to_string()),
        ("PIP_BREAK_SYSTEM_PACKAGES".into(), "1".into()),
    ];
    env.extend(state.store.secret_values().map_err(|e| e.to_string())?);
    env.extend(run.env.iter().map(|e| (e.key.clone(), e.value.clone())));
    env.extend([
        ("DIVERGENT_RUN_ID".into(), run.id.clone()),
        ("DIVERGENT_RUN_NAME".into(), run.name.clone()),
        (
            "DIVERGENT_RESULT_PATH".into(),
            in_tmp.join("divergent/result.json").display().to_string(),
        ),
        (
            "DIVERGENT_TELEMETRY_PATH".into(),
            in_tmp
                .join("divergent/telemetry.jsonl")
                .display()
                .to_string(),
        ),
    ]);
    let real_gpus = sku.gpu && !state.inventory.emulated;
    if real_gpus {
        let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
        env.push(("CUDA_VISIBLE_DEVICES".into(), list.join(",")));
    }
    let _ = in_workspace;
    // A run that shipped nothing (`--no-upload`) runs "the image as it is" and starts in its
    // working directory; here the image is this machine's own system, whose is `/`.
    let shipped = run.code.is_some();
    let argv = if state.sandboxed {
        let devices = if real_gpus {
            sandbox::gpu_devices(gpus)
        } else {
            Vec::new()
        };
        sandbox::bwrap_argv(&SandboxInput {
            home: &state.home,
            workspace: &workspace,
            tmp: &tmp,
            mnt: &mnt,
            volumes: &volumes,
            devices: &devices,
            command: &run.command,
            chdir: if shipped { "/workspace" } else { "/" },
        })
    } else {
        sandbox::direct_argv(&run.command, &dir.join("bin"))
    };
    let started_ms = supervisor::now_ms();
    let spec = RunSpec {
        run_id: run.id.clone(),
        run_name: run.name.clone(),
        argv,
        cwd: if shipped {
            workspace.clone()
        } else {
            PathBuf::from("/")
        },
        env,
        first_lines,
        cores: cores.to_vec(),
        memory_bytes: u64::from(run.memory_gib) << 30,
        cgroups: state.cgroups.clone(),
        cents_per_hour: run.cents_per_hour,
        max_spend_cents: run.max_spend_cents,
        max_seconds: deps::MAX_RUN_SECONDS,
        started_ms,
        checks: run.checks.clone(),
        result_path: tmp.join("divergent/result.json"),
        telemetry_path: tmp.join("divergent/telemetry.jsonl"),
        mnt_dir: state.sandboxed.then(|| mnt.clone()),
        volumes: volumes.iter().map(|(n, _)| n.clone()).collect(),
        workspace,
    };
    supervisor::write_json_atomic(&dir.join("spec.json"), &spec).map_err(io)?;
    let _ = fs::remove_file(dir.join("end.json"));
    let _ = fs::remove_file(dir.join("stop"));
    let mut child = Command::new(&state.supervisor.program)
        .args(&state.supervisor.args)
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "the supervisor `{}` could not start: {e}",
                state.supervisor.program.display()
            )
        })?;
    let pid = child.id();
    // Reap it when it exits, so a finished supervisor is not mistaken for a live one.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    record.internal = RunInternal {
        pid: Some(pid),
        cores: cores.to_vec(),
        gpus: gpus.to_vec(),
        started_ms: Some(started_ms),
    };
    record.run.status = RunStatus::Running;
    record.run.started_at = Some(now_rfc3339(started_ms));
    state.store.update_run(record).map_err(|e| e.to_string())
}
