//! The executor: the seam between the server and where runs run.
//!
//! The invariant: **an executor decides only where a run runs.** The server decides what
//! runs and when (validation, the queue, GPUs and cores); the supervisor next to the run
//! (`div __supervise <run-dir>`) runs it and writes the truth on disk: `end.json` with its
//! status, spend and verdicts, the log, the kept result and telemetry. An executor starts
//! that supervisor somewhere, asks it to stop, and says whether it is still there; it never
//! writes a run's status, and the server never reads a run's end from anywhere but its run
//! directory.
//!
//! There are two: [`LocalExecutor`], a supervisor process on this machine, and
//! [`slurm::SlurmExecutor`], one Slurm job a run with a supervisor on each node, whose runs'
//! ends the control plane decides once for the whole run (`div_runtime::decision`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub(crate) mod slurm;

use crate::SupervisorCommand;
use div_runtime::cgroup::{self, RunCgroups};
use div_runtime::{supervisor, sys};

/// What the launcher hands an executor: a run directory already holding the supervisor's
/// `spec.json`, with no `end.json` and no `stop`.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    pub(crate) run_dir: &'a Path,
    /// The run as placed: its SKU, size, price and ceiling (an executor that asks another
    /// scheduler for room needs them).
    pub(crate) run: &'a div_api::Run,
    /// The run's secrets, in order, for the supervisor (never in `spec.json`): given to it
    /// the executor's way, through a pipe where it can be.
    pub(crate) secrets: &'a [(String, String)],
    /// Woken when the supervisor exits, where the executor can tell (the scheduler then
    /// gathers the run's end at once rather than at its next tick).
    pub(crate) exited: &'a Arc<tokio::sync::Notify>,
}

/// What a run asks for, as validated: what an executor checks before the run is created.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement<'a> {
    pub(crate) sku: &'a str,
    pub(crate) gpus: u32,
    pub(crate) cores: u32,
    pub(crate) memory_gib: u32,
}

/// Where a started run's supervisor is, as its executor recorded it; kept in the run's
/// record. For the local executor it is the supervisor's process id (stored as `pid`, the
/// field older state directories have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Handle {
    pub(crate) pid: u32,
}

/// Whether a run's supervisor is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It runs: its end is still to come.
    Alive,
    /// It is gone: either it wrote `end.json`, or it was lost.
    Gone,
}

/// Where runs run. See the module's invariant.
pub(crate) trait Executor: std::fmt::Debug + Send + Sync {
    /// Starts the supervisor of the run prepared in `launch.run_dir`.
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, String>;
    /// Asks the run's supervisor to stop the run. It ends the run itself (with its grace
    /// for the command, then a kill of its whole tree) and writes its end as usual.
    fn stop(&self, run_dir: &Path, handle: Option<&Handle>) -> std::io::Result<()>;
    /// Whether the run's supervisor is still there.
    fn liveness(&self, run_dir: &Path, handle: Option<&Handle>) -> Liveness;
    /// Kills and removes whatever a lost run (its supervisor gone without an end) left where
    /// it ran, so no orphan survives it.
    fn reclaim(&self, run_id: &str);
    /// One line for people: where this executor runs runs.
    fn describe(&self) -> String;
    /// Refuses, before anything is created, a run this executor can never place (the local
    /// executor has nothing to add to the server's own checks).
    fn check(&self, _placement: &Placement<'_>) -> Result<(), String> {
        Ok(())
    }
    /// Whether a run started here first waits in another scheduler's queue (Slurm's): it is
    /// then shown queued, and billed nothing, until [`Executor::started_ms`] says it runs.
    fn queues(&self) -> bool {
        false
    }
    /// When a run that [`queues`](Executor::queues) started running; `None` while it waits.
    fn started_ms(&self, _run_dir: &Path) -> Option<u64> {
        None
    }
    /// Why a started run still waits, in its executor's own words.
    fn waiting(&self, _run_dir: &Path, _handle: Option<&Handle>) -> Option<String> {
        None
    }
    /// Whether the control plane decides when this executor's runs reach their ceiling and
    /// time limit, once for the whole run (`div_runtime::decision`), rather than each supervisor
    /// for its own part: a run on several nodes.
    fn decides_limits(&self) -> bool {
        false
    }
    /// A part of a running run that stopped reporting, said as the run's reason; `None`
    /// while every part is well.
    fn lost(&self, _run_dir: &Path) -> Option<String> {
        None
    }
}

/// Runs each run under a supervisor process on this machine, in its own session so that it
/// outlives the server.
#[derive(Debug)]
pub(crate) struct LocalExecutor {
    supervisor: SupervisorCommand,
    cgroups: cgroup::Plan,
}

impl LocalExecutor {
    pub(crate) fn new(supervisor: SupervisorCommand, cgroups: cgroup::Plan) -> LocalExecutor {
        LocalExecutor {
            supervisor,
            cgroups,
        }
    }
}

impl Executor for LocalExecutor {
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, String> {
        let mut child = Command::new(&self.supervisor.program)
            .args(&self.supervisor.args)
            .arg(launch.run_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "the supervisor `{}` could not start: {e}",
                    self.supervisor.program.display()
                )
            })?;
        let pid = child.id();
        // The secrets go down the supervisor's stdin, closed after them; from a thread, so a
        // supervisor slow to read (or one that leaves without reading) never holds the server.
        if let Some(mut pipe) = child.stdin.take() {
            let secrets = serde_json::to_vec(launch.secrets).unwrap_or_else(|_| b"[]".to_vec());
            std::thread::spawn(move || {
                let _ = std::io::Write::write_all(&mut pipe, &secrets);
            });
        }
        // Reap it when it exits, so a finished supervisor is not mistaken for a live one, and
        // wake the scheduler to gather the end it wrote.
        let exited = Arc::clone(launch.exited);
        std::thread::spawn(move || {
            let _ = child.wait();
            exited.notify_one();
        });
        wait_for_arguments(pid);
        Ok(Handle { pid })
    }

    fn stop(&self, run_dir: &Path, _handle: Option<&Handle>) -> std::io::Result<()> {
        // The supervisor looks for this file every 20 ms. No signal is sent: one that
        // arrived between the supervisor's exec and its handler being installed would kill
        // it before it wrote the run's end, and the run would read as lost.
        fs::write(run_dir.join(supervisor::STOP_FILE), b"")
    }

    fn liveness(&self, run_dir: &Path, handle: Option<&Handle>) -> Liveness {
        if handle.is_some_and(|h| supervisor_alive(h.pid, run_dir)) {
            return Liveness::Alive;
        }
        // No pid, or not the supervisor's any more: the server was killed between starting
        // a supervisor and recording it, or the launch was repeated and the other supervisor
        // won the run. Whoever holds the run's lock is its supervisor. Taking it here (never
        // done while the recorded supervisor may still be starting, above) and leaving the
        // mark under it means none starts the run after this says it is gone.
        match supervisor::claim(run_dir) {
            Ok(None) => Liveness::Alive,
            Ok(Some(_lock)) => {
                if !run_dir.join("end.json").exists() {
                    let _ = fs::write(run_dir.join(supervisor::ABANDONED_FILE), b"");
                }
                Liveness::Gone
            }
            Err(_) => Liveness::Gone,
        }
    }

    fn reclaim(&self, run_id: &str) {
        let left = RunCgroups::left_by(&self.cgroups, run_id);
        for pid in left.pids() {
            sys::kill(pid, libc::SIGKILL);
        }
        left.remove();
    }

    fn describe(&self) -> String {
        format!(
            "local: a supervisor process on this machine (`{}`)",
            command_line(&self.supervisor.program, &self.supervisor.args)
        )
    }
}

/// Waits (at most a second) until the new process's command line can be read. `spawn`
/// returns once the kernel has given the child its new memory, a moment before its
/// arguments are in it; [`supervisor_alive`] read then finds no run directory (seen about
/// once in 40 starts on a busy machine, by
/// `a_started_supervisor_is_alive_until_it_exits_and_stop_asks_it_through_its_directory`).
/// [`supervisor_alive`] itself takes an empty command line as "still starting, alive", which
/// is the fix that also holds after a restart or past this wait; this wait only means the
/// first look after a start already sees the run directory.
fn wait_for_arguments(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn command_line(program: &Path, args: &[String]) -> String {
    let mut line = PathBuf::from(program).display().to_string();
    for arg in args {
        line.push(' ');
        line.push_str(arg);
    }
    line
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
    // yet, so alive: the next tick looks again. ([`wait_for_arguments`] waits for this at
    // start; this also covers a server restarted while a supervisor was starting, and a
    // start whose wait ran out.)
    if cmdline.is_empty() {
        return true;
    }
    let needle = run_dir.as_os_str().as_encoded_bytes();
    cmdline.split(|b| *b == 0).any(|arg| arg == needle)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::{Executor, Handle, Launch, Liveness, LocalExecutor};
    use crate::SupervisorCommand;

    /// A placed run, as the launcher hands it over (the local executor does not look at it).
    fn placed() -> div_api::Run {
        serde_json::from_value(serde_json::json!({
            "id": "r_test", "name": "run-test", "project": "tests", "status": "queued",
            "entrypoint": "true", "command": "true", "sku": "cpu", "gpus": 0, "cores": 1,
            "memory_gib": 2, "cents_per_hour": 30, "spent_cents": 0,
            "image": div_spec::DEFAULT_IMAGE, "env": [], "checks": [], "verdicts": [],
            "created_at": "2026-11-30T00:00:00Z", "log_bytes": 0
        }))
        .expect("a placed run")
    }

    /// A local executor whose "supervisor" is `sh -c SCRIPT <run-dir>`: the run directory is
    /// on its command line, as the real supervisor's is.
    fn local(script: &str) -> LocalExecutor {
        LocalExecutor::new(
            SupervisorCommand {
                program: "sh".into(),
                args: vec!["-c".into(), script.into()],
            },
            Default::default(),
        )
    }

    fn wait_until_gone(executor: &LocalExecutor, dir: &Path, handle: &Handle) -> Liveness {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut liveness = executor.liveness(dir, Some(handle));
        while liveness == Liveness::Alive && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            liveness = executor.liveness(dir, Some(handle));
        }
        liveness
    }

    #[test]
    fn a_started_supervisor_is_alive_until_it_exits_and_stop_asks_it_through_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        // Waits for the `stop` file, as the supervisor does, then exits.
        let executor = local("while [ ! -e \"$0/stop\" ]; do sleep 0.01; done");
        let exited = std::sync::Arc::new(tokio::sync::Notify::new());
        let handle = executor
            .start(&Launch {
                run_dir: dir.path(),
                run: &placed(),
                secrets: &[],
                exited: &exited,
            })
            .unwrap();
        assert_eq!(
            executor.liveness(dir.path(), Some(&handle)),
            Liveness::Alive
        );
        executor.stop(dir.path(), Some(&handle)).unwrap();
        assert!(dir.path().join("stop").exists());
        assert_eq!(
            wait_until_gone(&executor, dir.path(), &handle),
            Liveness::Gone
        );
        // Its exit woke whoever gathers ends (a permit is kept for a waiter still to come).
        let woken = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(30), exited.notified()).await
            });
        assert!(woken.is_ok(), "the supervisor's exit woke nothing");
    }

    #[test]
    fn a_live_process_that_is_not_this_runs_supervisor_reads_as_gone() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        // `; :` keeps the shell (and so the run directory on its command line) alive.
        let executor = local("sleep 30; :");
        // A pid reused by a process of another run directory, and this test's own pid.
        let handle = executor
            .start(&Launch {
                run_dir: other.path(),
                run: &placed(),
                secrets: &[],
                exited: &Default::default(),
            })
            .unwrap();
        assert_eq!(
            executor.liveness(other.path(), Some(&handle)),
            Liveness::Alive
        );
        assert_eq!(executor.liveness(dir.path(), Some(&handle)), Liveness::Gone);
        let me = Handle {
            pid: std::process::id(),
        };
        // (A look can find the run directory's lock held for a moment: a process this test
        // binary forks meanwhile holds a copy of the last look's descriptor until it execs.)
        assert_eq!(wait_until_gone(&executor, dir.path(), &me), Liveness::Gone);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut unrecorded = executor.liveness(dir.path(), None);
        while unrecorded == Liveness::Alive && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            unrecorded = executor.liveness(dir.path(), None);
        }
        assert_eq!(unrecorded, Liveness::Gone);
        assert!(div_runtime::sys::kill(handle.pid, libc::SIGKILL));
        assert_eq!(
            wait_until_gone(&executor, other.path(), &handle),
            Liveness::Gone
        );
    }

    #[test]
    fn a_supervisor_that_cannot_start_says_which_program() {
        let dir = tempfile::tempdir().unwrap();
        let executor = LocalExecutor::new(
            SupervisorCommand {
                program: "/nonexistent/div".into(),
                args: vec!["__supervise".into()],
            },
            Default::default(),
        );
        let err = executor
            .start(&Launch {
                run_dir: dir.path(),
                run: &placed(),
                secrets: &[],
                exited: &Default::default(),
            })
            .unwrap_err();
        assert!(
            err.starts_with("the supervisor `/nonexistent/div` could not start: "),
            "{err}"
        );
        assert_eq!(
            executor.describe(),
            "local: a supervisor process on this machine (`/nonexistent/div __supervise`)"
        );
    }
}
