//! The local executor's faults, each performed: the run's supervisor killed with SIGKILL, the
//! control plane killed during a stop's grace, the run killed for its memory while a stop
//! is in flight. Each run ends once, with one status, its last line, and its spend at the
//! moment it ended.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::world::{PATIENCE, Place, World, holds_lines, pids_with_arg, text};

/// What `seconds` of a run at `cents_per_hour` cost, as div bills it: to the second, rounded
/// half up to the cent.
fn cost(cents_per_hour: i64, seconds: i64) -> i64 {
    (cents_per_hour * seconds * 2 + 3600).div_euclid(7200)
}

/// The run's spend is what its own duration costs: billed to the moment it ended.
fn assert_billed_to_its_end(run: &Value) {
    let rate = run["cents_per_hour"].as_i64().expect("a rate");
    let seconds = run["duration_seconds"].as_i64().expect("a duration");
    assert_eq!(
        run["spent_cents"].as_i64(),
        Some(cost(rate, seconds)),
        "{run}"
    );
}

/// Places `python3 SCRIPT` on `gpu` (4 emulated H100s by default: a price that shows in
/// cents), detached, and waits for it to be training.
fn training(world: &World, name: &str, script: &str, gpu: &[&str]) {
    training_with_grace(world, name, script, gpu, 8);
}

/// [`training`] with a grace of `grace` seconds.
fn training_with_grace(world: &World, name: &str, script: &str, gpu: &[&str], grace: u32) {
    let grace = format!("DIVERGENT_STOP_GRACE={grace}");
    let mut args = vec!["run", "--detach", "--name", name];
    args.extend(if gpu.is_empty() {
        &["--gpu", "h100", "--gpus", "4"][..]
    } else {
        gpu
    });
    let command = format!("python3 {script}");
    args.extend(["--env", &grace, "--check", "saved==true", "--", &command]);
    let out = world.div(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    world.wait_log(name, None, &["training"]);
}

/// `div logs NAME` once the run has ended: its exit code and last line.
fn last_line(world: &World, name: &str) -> (Option<i32>, String) {
    let out = world.div(&["logs", name, "--follow"]);
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default().to_owned();
    (out.status.code(), last)
}

#[test]
fn a_supervisor_killed_mid_run_ends_its_run_once_failed_and_billed_to_that_moment() {
    let world = World::new(Place::Local).expect("a local world");
    training(&world, "orphaned", "train.py", &[]);
    let dir = world.run_dir("orphaned");
    let supervisor: Vec<u32> = pids_with_arg(&dir)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__supervise"))
        })
        .collect();
    assert_eq!(supervisor.len(), 1, "one supervisor: {supervisor:?}");
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &supervisor[0].to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let run = world.wait_end("orphaned");
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["reason"], "the supervisor was lost", "{run}");
    assert_billed_to_its_end(&run);
    let (code, last) = last_line(&world, "orphaned");
    assert_eq!(code, Some(209), "{last}");
    assert!(
        last.starts_with("run-") || last.starts_with("orphaned"),
        "{last}"
    );
    assert!(
        last.contains(" failed after ") && last.contains("the supervisor was lost — $"),
        "{last}"
    );
    // Nothing of it runs on (its sandbox went with its supervisor), and it is never placed
    // again: one life, one start.
    let deadline = Instant::now() + PATIENCE;
    while !pids_with_arg(&dir.join("workspace")).is_empty() {
        assert!(Instant::now() < deadline, "the run's sandbox outlived it");
        std::thread::sleep(Duration::from_millis(100));
    }
    let again = world.run_json("orphaned");
    assert_eq!(again["status"], "failed", "{again}");
    assert_eq!(
        world.log("orphaned", None).matches("\ntraining\n").count(),
        1,
        "started once"
    );
}

#[test]
fn the_control_plane_killed_during_a_stops_grace_loses_neither_the_result_nor_the_end() {
    let world = World::new(Place::Local).expect("a local world");
    training(&world, "graceful", "train.py", &[]);
    // `div stop` asks, and waits; the control plane is killed while the handler saves.
    let mut stop = world
        .command(&["stop", "graceful"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("div stop");
    world.wait_log(
        "graceful",
        None,
        &["got signal 15: will save a checkpoint and exit"],
    );
    let pid = std::fs::read_to_string(world.home().join("server.pid"))
        .expect("the server's pid")
        .trim()
        .to_owned();
    assert!(
        std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let _ = stop.wait();
    // The next `div` starts it again; the supervisor went on, and its end is read.
    let run = world.wait_end("graceful");
    assert_eq!(run["status"], "canceled", "{run}");
    assert_eq!(
        run["verdicts"][0]["line"], "check passed: saved == true (found true)",
        "{run}"
    );
    assert_billed_to_its_end(&run);
    assert!(holds_lines(&world.log("graceful", None), &["saved"]));
    let (code, last) = last_line(&world, "graceful");
    assert_eq!(code, Some(206), "{last}");
    assert!(last.contains(" was canceled after "), "{last}");
}

/// A handler that writes a large checkpoint: 3 GiB, past the container's 2 GiB, a page at a
/// time (slow enough for the supervisor's poll to see it pass 2 GiB where no cgroup holds it).
const HOG_PY: &str = r#"import signal, sys, time


def on_term(signum, frame):
    print("got signal 15: saving a big checkpoint", flush=True)
    blob = bytearray(3 << 30)
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    print("saved", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_term)
print("training", flush=True)
while True:
    time.sleep(0.05)
"#;

#[test]
fn a_run_killed_for_its_memory_while_it_stops_ends_canceled_and_says_why() {
    let world = World::new(Place::Local).expect("a local world");
    std::fs::write(world.project().join("hog.py"), HOG_PY).expect("hog.py");
    // The cpu SKU: a container of 2 GiB, held by a memory cgroup where there is one. A grace
    // of two minutes, a bound and not a wait: the handler is killed as it passes 2 GiB. With
    // 8 s, under `.ci/stress`, it once ended with neither `saved` nor the memory line: the
    // grace ended first (its loop takes 2.3 s here idle, 50 s beside 40 busy loops).
    training_with_grace(&world, "hog", "hog.py", &["--gpu", "cpu"], 120);
    let out = world.div(&["stop", "hog"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = world.wait_end("hog");
    // The stop came first: that is how it ended. Its handler did not get to write.
    assert_eq!(run["status"], "canceled", "{run}");
    assert!(
        run["verdicts"][0]["line"]
            .as_str()
            .is_some_and(|l| l.starts_with("check unknown: saved == true")),
        "{run}"
    );
    assert_billed_to_its_end(&run);
    let log = world.log("hog", None);
    assert!(
        log.contains("div: the run was killed for its memory (")
            && log.contains(" GiB) during its grace, before it had exited\n"),
        "{log}\n{run}"
    );
    assert!(!holds_lines(&log, &["saved"]), "{log}");
    let (code, last) = last_line(&world, "hog");
    assert_eq!(code, Some(206), "{last}");
}
