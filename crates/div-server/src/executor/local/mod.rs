//! The local executor: each run's supervisor, a process of its own session on this machine,
//! started with its secrets down its stdin, reaped when it exits, asked to stop through its
//! run directory, found again by its pid or its lock.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use super::{Executor, Handle, Launch, Liveness, StartError};
use crate::SupervisorCommand;
use div_runtime::cgroup::{self, RunCgroups};
use div_runtime::{supervisor, sys};

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
    fn start(&self, launch: &Launch<'_>) -> Result<Handle, StartError> {
        let mut child = Command::new(&self.supervisor.program)
            .args(&self.supervisor.args)
            .arg(launch.run_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| StartError::Spawn {
                program: self.supervisor.program.display().to_string(),
                source,
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
        // Wake the scheduler to gather the run's end the moment the supervisor writes it
        // (it lets the run's places go after), and reap the supervisor when it exits, so a
        // finished one is not mistaken for a live one.
        let exited = Arc::clone(launch.exited);
        let run_dir = launch.run_dir.to_path_buf();
        std::thread::spawn(move || {
            let watch = div_runtime::waiting::EndWatch::new(&run_dir, "end.json", pid);
            if watch.wait() == div_runtime::waiting::Seen::File {
                exited.notify_one();
            }
            drop(watch);
            let _ = child.wait();
            exited.notify_one();
        });
        wait_for_arguments(pid);
        Ok(Handle::Process(pid))
    }

    fn stop(&self, run_dir: &Path, _handle: Option<&Handle>) -> std::io::Result<()> {
        // The supervisor looks for this file every 20 ms. No signal is sent: one that
        // arrived between the supervisor's exec and its handler being installed would kill
        // it before it wrote the run's end, and the run would read as lost.
        fs::write(run_dir.join(supervisor::STOP_FILE), b"")
    }

    fn liveness(&self, run_dir: &Path, handle: Option<&Handle>) -> Liveness {
        if let Some(pid) = handle.and_then(Handle::process)
            && supervisor_alive(pid, run_dir)
        {
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

    use super::LocalExecutor;
    use crate::SupervisorCommand;
    use crate::executor::{Executor, Handle, Launch, Liveness};

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
                member: "owner",
                account: None,
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
                member: "owner",
                account: None,
            })
            .unwrap();
        assert_eq!(
            executor.liveness(other.path(), Some(&handle)),
            Liveness::Alive
        );
        assert_eq!(executor.liveness(dir.path(), Some(&handle)), Liveness::Gone);
        let me = Handle::Process(std::process::id());
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
        assert!(div_runtime::sys::kill(
            handle.process().expect("a process"),
            libc::SIGKILL
        ));
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
                member: "owner",
                account: None,
            })
            .unwrap_err();
        assert!(matches!(err, super::StartError::Spawn { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("the supervisor `/nonexistent/div` could not start: "),
            "{err}"
        );
        assert_eq!(
            executor.describe(),
            "local: a supervisor process on this machine (`/nonexistent/div __supervise`)"
        );
    }
}
