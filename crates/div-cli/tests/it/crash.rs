//! The local control plane killed with SIGKILL at random moments during a batch of runs, and
//! restarted: every run ends with its true status, log and result; none is lost, none stays
//! `running`. And stopped while `div run` follows a run: the follower waits for it.

use std::process::{Child, Stdio};
use std::time::Duration;

use div_test_support::wait_until;
use serde_json::Value;

use crate::support::Local;

/// `div server run` in the foreground, as its own process; returns once it answers.
#[allow(clippy::zombie_processes)] // returned: `kill` waits on it
fn start_server(local: &Local) -> Child {
    let mut child = local
        .command(&["server", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("div server run starts");
    let up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("the server up", Duration::from_secs(20), || {
            let out = local
                .command(&["server", "status"])
                .output()
                .expect("div server status");
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if said.contains("is running") {
                Ok(())
            } else {
                Err(said)
            }
        })
    }));
    if let Err(panic) = up {
        let _ = child.kill();
        let _ = child.wait();
        std::panic::resume_unwind(panic);
    }
    child
}

fn kill(mut child: Child) {
    // SIGKILL: no chance to clean up.
    child.kill().expect("the server is killed");
    let _ = child.wait();
}

fn runs(local: &Local) -> Vec<Value> {
    let out = local
        .command(&["runs", "--all", "--limit", "100", "--json"])
        .output()
        .expect("div runs");
    serde_json::from_slice(&out.stdout).expect("div runs --json is JSON")
}

/// What run `i` does: five lines a tenth of a second apart, a result, an exit code.
fn command(i: usize) -> String {
    format!(
        "for n in 1 2 3 4 5; do echo \"run {i} line $n\"; sleep 0.1; done; \
         echo '{{\"metrics\": {{\"i\": {i}}}}}' > \"$DIVERGENT_RESULT_PATH\"; exit {}",
        i % 3
    )
}

#[test]
fn server_killed_at_random_moments_loses_no_run() {
    let local = Local::new("project", &[("train.py", "print(1)\n")]);

    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut random = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let mut server = start_server(&local);
    let mut names = Vec::new();
    for round in 0..4 {
        for k in 0..3 {
            let i = round * 3 + k;
            let out = local
                .command(&["run", "--detach", "--gpu", "cpu", "--", &command(i)])
                .output()
                .expect("div run --detach");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            names.push((i, String::from_utf8_lossy(&out.stdout).trim().to_owned()));
        }
        // The fault: a kill at a random moment while the runs go on.
        std::thread::sleep(Duration::from_millis(50 + random(400)));
        kill(server);
        server = start_server(&local);
    }

    let all = wait_until("every run ended", Duration::from_secs(60), || {
        let all = runs(&local);
        let going = all
            .iter()
            .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
            .count();
        if going == 0 {
            Ok(all)
        } else {
            Err(format!("{going} runs going: {all:?}"))
        }
    });
    assert_eq!(all.len(), names.len(), "a run was lost or doubled");

    for (i, name) in &names {
        let run = all
            .iter()
            .find(|r| r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("run {name} was lost"));
        let code = (i % 3) as i64;
        assert_eq!(run["exit_code"], code, "{run}");
        let status = if code == 0 { "succeeded" } else { "failed" };
        assert_eq!(run["status"], status, "{run}");

        let log = local.div(&["logs", name]);
        let log = String::from_utf8_lossy(&log.stdout);
        for n in 1..=5 {
            let line = format!("run {i} line {n}\n");
            assert_eq!(log.matches(&line).count(), 1, "{line:?} in {log:?}");
        }
        let result = local.div(&["result", "--json", name]);
        let result: Value = serde_json::from_slice(&result.stdout).expect("div result --json");
        assert_eq!(result["result"]["metrics"]["i"], *i as i64, "{result}");
    }
    kill(server);
}

/// Reads lines up to the first that starts with `prefix`; returns the lines read.
fn lines_until(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    prefix: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.expect("text");
        let done = line.starts_with(prefix);
        seen.push(line);
        if done {
            return seen;
        }
    }
    panic!("no line starting with `{prefix}` in {seen:?}");
}

/// `div run` follows a run while the local control plane is stopped (`div server stop`: the
/// run goes on under its supervisor) for longer than the log stream's own deadline (6 s here,
/// `DIVERGENT_API_TIMEOUT`, past the server's 5-second beat; `div` used to give up there with
/// exit 201): it says it waits, and
/// once the control plane is started again (by the next `div`, which opens the run's gate),
/// it says so, prints the rest of the log, each line once, and exits with the run's own code.
#[test]
fn a_follower_waits_for_a_stopped_control_plane_and_goes_on_once_it_is_back() {
    use std::io::BufRead;
    let local = Local::new("project", &[("train.py", "print(1)\n")]);
    let mut follower = local
        .command(&[
            "run",
            "--gpu",
            "cpu",
            "--",
            "echo before; while [ ! -e /mnt/gate/go ]; do sleep 0.1; done; echo after; exit 3",
        ])
        .env("DIVERGENT_API_TIMEOUT", "6")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("div run starts");
    // A deadline on the whole test, not a wait: a follower still going then is stopped, and
    // the reads below end.
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let pid = follower.id().to_string();
    let watchdog = std::thread::spawn(move || {
        if watch.recv_timeout(Duration::from_secs(300)).is_err() {
            let _ = std::process::Command::new("kill").arg(&pid).status();
        }
    });
    let mut out = std::io::BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let mut err = std::io::BufReader::new(follower.stderr.take().expect("stderr")).lines();
    lines_until(&mut out, "before");

    let stop = local.div(&["server", "stop"]);
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    // (A beat late past the deadline on a busy machine reads as a moment away, and back: the
    // wait that counts is the one for a control plane that cannot be reached.)
    loop {
        let said = lines_until(
            &mut err,
            "div: the control plane does not answer; waiting for it while run-",
        );
        let waiting = said.last().expect("a line");
        // A day from its start, its grace (the most a control plane gives: 10 minutes) and 5.
        assert!(
            waiting.contains(" may still be going (at most 24h 1"),
            "{said:?}"
        );
        let cause = err.next().expect("the cause").expect("text");
        assert!(cause.starts_with("  "), "{cause}");
        if cause.contains("could not reach the control plane at `unix://") {
            break;
        }
    }

    // Started again by the next `div`, which opens the gate the run waits at.
    let gate = local.tmp.path().join("gate");
    std::fs::create_dir_all(&gate).expect("mkdir");
    std::fs::write(gate.join("go"), "").expect("write");
    let put = local.div(&["storage", "put", "gate", &gate.to_string_lossy()]);
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );

    let rest: Vec<String> = out.map(|l| l.expect("text")).collect();
    let said: Vec<String> = err.map(|l| l.expect("text")).collect();
    let code = follower.wait().expect("div run ends").code();
    let _ = done.send(());
    watchdog.join().expect("the watchdog ends");
    assert_eq!(rest, ["after"], "the rest of the log, each line once");
    assert_eq!(code, Some(3), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.starts_with("div: the control plane answers again after ")),
        "{said:?}"
    );
    let last = said.last().map(String::as_str).unwrap_or_default();
    assert!(
        last.contains(" failed after ") && last.contains("(exit 3)"),
        "{said:?}"
    );
}
