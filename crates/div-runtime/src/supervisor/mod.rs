//! The per-run supervisor: a small process, in its own session, that owns one run.
//!
//! The server writes `run-dir/spec.json` and launches it; it runs the command, appends its
//! output to `run-dir/log`, holds it to its memory, cores, tasks, disk, ceiling and 24 hours,
//! judges the checks once it exits and writes `run-dir/end.json` last, atomically. Nothing it
//! does depends on the server still running.
//!
//! One run's life, in phases, each a module: [`prepare`] (its log, cores, cgroups and mounts),
//! [`launch`] (bubblewrap under div-init, in its cgroups), [`watch`] (until something ends it),
//! [`stop`] (SIGTERM, its grace, SIGKILL), [`end`] (its outcome, what it left, its places let
//! go). What it is given and leaves is in [`spec`], its lock in [`lock`], its process tree in
//! `tree`, and reading back what the run left without trusting it in `untrusted`.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use div_api::RunStatus;

use crate::clock::now_ms;
use crate::sys;

mod end;
mod launch;
mod lock;
mod prepare;
mod spec;
mod stop;
mod tree;
mod untrusted;
mod watch;

pub use lock::{ABANDONED_FILE, LOCK_FILE, UNSENT_FILE, claim};
pub use spec::{
    EndRecord, HEARTBEAT, KeptResult, KeptTelemetry, NodeDuties, RunSpec, write_json_atomic,
};
pub use untrusted::read_telemetry;

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

/// The body of `div __supervise <run-dir>` and `div-supervise <run-dir>`.
pub fn supervise(run_dir: &Path) -> i32 {
    sys::new_session();
    sys::catch_stop_signals();
    // One supervisor per run, and none for a run already ended or given up on: held until
    // this process exits, after its end is written.
    // (A lock file that cannot be made at all, the run goes on without it, as before locks.)
    let _claim = match lock::claim_waiting(run_dir, std::time::Duration::from_secs(1)) {
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

/// Runs the run described by `spec` in `run_dir` through its phases to its end.
fn run(run_dir: &Path, spec: &RunSpec) -> EndRecord {
    let mut room = match prepare::prepare(run_dir, spec) {
        Ok(room) => room,
        Err(end) => return end,
    };
    let mut run = match launch::launch(spec, &mut room) {
        Ok(run) => run,
        Err(end) => {
            room.let_go(run_dir);
            return end;
        }
    };
    let mut watch = watch::Watch::new(spec, &mut room);
    let stopped = watch.until_stopped(run_dir, spec, &mut room, &run);
    let kill_at = stop::kill_at(&stopped, spec, &watch);
    let killed_for_memory =
        kill_at.is_some_and(|at| stop::grace(spec, &mut room, &run, &mut watch, &stopped, at));
    let status = tree::kill_tree(&mut run.child, &room.cgroups, run.contained);
    if matches!(stopped, watch::Stopped::Gone) {
        // Nowhere to write its end: what it held is let go, and nothing more is done.
        room.let_go(run_dir);
        return early_end(spec, "the run's directory is gone".to_owned());
    }
    end::record(
        run_dir,
        spec,
        room,
        stopped,
        status,
        kill_at.is_some(),
        killed_for_memory,
    )
}

/// The end of a run that never got going: failed, with `reason`, nothing spent.
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

#[cfg(test)]
mod tests {
    use super::launch::env_args;
    use super::lock::claim_waiting;
    use super::tree::terminate;
    use super::*;
    use crate::cgroup::Plan;
    use crate::decision::{self, Decision};
    use std::collections::BTreeSet;
    use std::process::Command;
    use std::time::Duration;

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
