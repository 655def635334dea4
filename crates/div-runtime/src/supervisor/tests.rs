//! The supervisor's phases together, on real processes.

use super::launch::env_args;
use super::life::run;
use super::lock::claim_waiting;
use super::tree::terminate;
use super::*;
use crate::cgroup::Plan;
use crate::clock::now_ms;
use crate::decision::{self, Decision};
use crate::sys;
use div_api::RunStatus;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// [`run`], its places let go once its end is known, as `supervise` does.
fn run_to_end(run_dir: &Path, spec: &RunSpec) -> EndRecord {
    let (end, places) = run(run_dir, spec);
    if let Some(places) = places {
        places.let_go(run_dir, spec);
    }
    end
}

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
    let end = run_to_end(dir.path(), &spec(dir.path(), &command, 1));
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
    let end = run_to_end(dir.path(), &spec);
    assert_eq!(end.status, RunStatus::Failed);
    assert_eq!(
        end.reason.as_deref(),
        Some("reached this machine's time limit of 4 s (max_run_seconds)")
    );
    assert_eq!(end.verdicts[0].line, "check passed: epoch >= 18 (found 18)");
    // Told no earlier than 2 s from its start (an upper bound would be a timing claim: on a
    // loaded machine the shell runs its trap late).
    assert!(end.duration_seconds >= 2, "{end:?}");
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
    let end = run_to_end(dir.path(), &spec(dir.path(), "echo going; sleep 30", 60));
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
    let end = run_to_end(dir.path(), &spec);
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
        "import os, signal, time\n\
         def on(*_):\n    open('{got}', 'a').write('term\\n')\n\
         signal.signal(signal.SIGTERM, on)\n\
         open('{got}.started', 'w').close()\n\
         signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])\n\
         end = time.time() + 60\n\
         while time.time() < end and not os.path.exists('{got}.done'): time.sleep(0.01)\n",
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
    // Looked at again for a while after it started: told once, not each time. (It goes on
    // until the test says it is done, however slowly a loaded machine runs it.)
    for _ in 0..20 {
        terminate(child.id(), true, &mut told);
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !got.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    fs::write(got.with_extension("done"), b"").expect("done");
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
    let end = run_to_end(&node_dir, &spec);
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
    let end = run_to_end(dir.path(), &spec(dir.path(), "echo done", 60));
    assert_eq!(end.status, RunStatus::Succeeded);
    assert_eq!(end.reason, None);
    let log = fs::read_to_string(dir.path().join("log")).expect("a log");
    assert_eq!(log, "done\n");
}
