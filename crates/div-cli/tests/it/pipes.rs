//! A reader that goes away (`div … | head`) and Ctrl-C on a follower, through the real `div`
//! on the local control plane: `div` ends as SIGPIPE ends any program, never by a panic, and a
//! run it followed goes on.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};

use crate::support::{Local, text};

/// SIGPIPE's number, as a killed process's status reports it.
const SIGPIPE: i32 = 13;

/// A run that says `started`, then `tick` every tenth of a second until it is stopped.
const TICKING: &str = "echo started; while true; do echo tick; sleep 0.1; done";

fn project() -> Local {
    Local::new("pipes", &[("train.py", "print('hi')\n")])
}

/// Reads lines from `reader` until one is `until`; returns every line read.
fn read_until(reader: &mut impl BufRead, until: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("reads");
        assert!(n > 0, "ended before `{until}`: {lines:?}");
        let line = line.trim_end_matches('\n').to_string();
        let done = line == until;
        lines.push(line);
        if done {
            return lines;
        }
    }
}

/// The run's name from the header line (`run-k4t9  CPU  $0.30/h  no ceiling`).
fn run_name(lines: &[String]) -> String {
    lines
        .iter()
        .find_map(|l| {
            l.split_whitespace()
                .next()
                .filter(|w| w.starts_with("run-"))
        })
        .unwrap_or_else(|| panic!("no header line: {lines:?}"))
        .to_string()
}

/// The status of the run called `name`, from `div runs --json`.
fn status_of(local: &Local, name: &str) -> String {
    let out = local.div(&["runs", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    runs.iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["status"].as_str())
        .unwrap_or_else(|| panic!("no run {name}: {runs:?}"))
        .to_string()
}

fn stop(local: &Local, name: &str) {
    let stopped = local.div(&["stop", name]);
    let stderr = text(&stopped.stderr);
    assert_eq!(stopped.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with(&format!("{name} was canceled after ")),
        "{stderr}"
    );
}

/// `div args…` with stdout and stderr both one pipe whose read end is already closed (like
/// `div … 2>&1 | head -0`): how it exited.
fn into_closed_pipe(local: &Local, args: &[&str]) -> std::process::ExitStatus {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut cmd = local.command(args);
    cmd.stdin(Stdio::null())
        .stdout(writer.try_clone().expect("dup"))
        .stderr(writer);
    let status = cmd.status().expect("div runs");
    drop(cmd);
    status
}

/// `div run … 2>&1 | head -4`: once the reader has gone, `div` is ended by SIGPIPE (a panic
/// would exit 101) and the run goes on. With only stdout gone, stderr still says so.
#[test]
fn a_reader_that_goes_away_ends_div_run_as_sigpipe_does_and_the_run_goes_on() {
    let local = project();

    // stdout and stderr one pipe, read until the run's first tick, then closed.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    let mut cmd = local.command(&["run", "--gpu", "cpu", "--", TICKING]);
    cmd.stdin(Stdio::null())
        .stdout(writer.try_clone().expect("dup"))
        .stderr(writer);
    let mut child: Child = cmd.spawn().expect("div starts");
    drop(cmd); // our copies of the write end
    let mut reader = BufReader::new(reader);
    let lines = read_until(&mut reader, "tick");
    let name = run_name(&lines);
    drop(reader);
    let status = child.wait().expect("div exits");
    assert_eq!(status.signal(), Some(SIGPIPE), "{status:?} after {lines:?}");
    assert_eq!(status_of(&local, &name), "running");
    stop(&local, &name);

    // Only stdout gone (`div run … | head -3`): stderr says the run goes on.
    let mut child = local
        .command(&["run", "--gpu", "cpu", "--", TICKING])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("div starts");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    read_until(&mut out, "tick");
    drop(out);
    let done = child.wait_with_output().expect("div exits");
    let stderr = text(&done.stderr);
    assert_eq!(done.status.signal(), Some(SIGPIPE), "{stderr}");
    let name = run_name(&stderr.lines().map(String::from).collect::<Vec<_>>());
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "detached from {name}; it goes on\n  follow it again: div logs {name} --follow\n  stop it:         div stop {name}\n"
        )),
        "{stderr}"
    );
    assert_eq!(status_of(&local, &name), "running");
    stop(&local, &name);
}

/// `div runs`, `div logs` and `div --help` into a pipe nobody reads: ended by SIGPIPE, and
/// with stderr still open they say nothing there.
#[test]
fn a_closed_pipe_ends_runs_logs_and_help_as_sigpipe_does() {
    let local = project();
    let out = local.div(&["run", "--gpu", "cpu", "--name", "said", "--", "echo hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    for args in [
        &["runs"][..],
        &["logs", "said"],
        &["logs", "said", "--follow"],
        &["--help"],
        &["run", "--help"],
    ] {
        // Both into the closed pipe (`2>&1 | head -0`).
        let status = into_closed_pipe(&local, args);
        assert_eq!(status.signal(), Some(SIGPIPE), "div {args:?}: {status:?}");
        // Only stdout closed (its reader gone before div starts: a `div` quick enough would
        // otherwise write all of its help into the pipe before the reader closed it): nothing
        // on stderr, no panic.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let mut cmd = local.command(args);
        cmd.stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped());
        let child = cmd.spawn().expect("div starts");
        drop(cmd);
        let done = child.wait_with_output().expect("div exits");
        let stderr = text(&done.stderr);
        assert_eq!(
            done.status.signal(),
            Some(SIGPIPE),
            "div {args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("error"),
            "div {args:?}: {stderr}"
        );
    }
}

/// Ctrl-C on `div logs --follow` stops following and says the run goes on, with `div run`'s
/// detach lines and exit code (208); the run is still running.
#[test]
fn ctrl_c_on_logs_follow_says_the_run_goes_on() {
    let local = project();
    let out = local.div(&["run", "-d", "--gpu", "cpu", "--", TICKING]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let name = text(&out.stdout).trim().to_string();

    let mut child = local
        .command(&["logs", &name, "--follow"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("div starts");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    read_until(&mut out, "tick");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).expect("a pid"))
        .expect("a positive pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT sent");
    let done = child.wait_with_output().expect("div exits");
    let stderr = text(&done.stderr);
    assert_eq!(done.status.code(), Some(208), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "detached from {name}; it goes on\n  follow it again: div logs {name} --follow\n  stop it:         div stop {name}\n"
        )
    );
    assert_eq!(status_of(&local, &name), "running");
    stop(&local, &name);
}
