//! Slurm's own faults, performed on the loopback cluster: a node lost mid-run (its slurmd
//! killed with SIGKILL, started again after), the 32-GPU ceiling run many times, a run
//! waiting while an outside job holds every node, a `--memory` below what a node can give a
//! GPU, and a controller slower than div's deadline as its control plane starts.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::world::{PATIENCE, Place, World, holds_lines, text};

fn slurm_conf() -> String {
    std::env::var("SLURM_CONF").unwrap_or_else(|_| "/etc/slurm/slurm.conf".to_owned())
}

/// `sinfo`'s state of `node` (`idle`, `alloc`, `down*`…).
fn node_state(node: &str) -> String {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-n", node, "-o", "%t"])
        .output()
        .expect("sinfo");
    text(&out.stdout).trim().to_owned()
}

/// A node's slurmd, killed, and started again when this is dropped (however the test ends).
struct KilledSlurmd {
    node: String,
}

impl KilledSlurmd {
    fn kill(node: &str, pid_file: &str) -> KilledSlurmd {
        let pid = std::fs::read_to_string(pid_file)
            .unwrap_or_else(|e| panic!("{pid_file}: {e}"))
            .trim()
            .to_owned();
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .expect("kill")
                .success(),
            "slurmd {pid} of {node}"
        );
        KilledSlurmd {
            node: node.to_owned(),
        }
    }
}

impl Drop for KilledSlurmd {
    fn drop(&mut self) {
        let _ = Command::new("setsid")
            .args(["-f", "slurmd", "-D", "-N", &self.node, "-f", &slurm_conf()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // Back in service (ReturnToService=2 brings it back once it registers; said again
        // in case it was marked down meanwhile).
        let deadline = Instant::now() + PATIENCE;
        loop {
            let _ = Command::new("scontrol")
                .args(["update", &format!("NodeName={}", self.node), "State=RESUME"])
                .stderr(Stdio::null())
                .status();
            let state = node_state(&self.node);
            if matches!(state.as_str(), "idle" | "mix" | "alloc") || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// `seconds` of a run at `cents_per_hour`, as div bills it (to the second, half up).
fn cost(cents_per_hour: i64, seconds: i64) -> i64 {
    (cents_per_hour * seconds * 2 + 3600).div_euclid(7200)
}

/// The jobs Slurm still lists for the run.
fn jobs_of(run: &Value) -> String {
    let id = run["id"].as_str().unwrap_or_default();
    let out = Command::new("squeue")
        .args(["-h", "-n", &format!("div-{id}"), "-o", "%i %T"])
        .output()
        .expect("squeue");
    text(&out.stdout).trim().to_owned()
}

#[test]
fn a_node_lost_mid_run_fails_the_run_naming_it_billed_to_then_and_it_never_runs_again() {
    let Some(world) = World::alone(Place::SlurmFourNodes) else {
        return;
    };
    world.slurm_toml(8);
    let out = world.div(&[
        "run",
        "--detach",
        "--name",
        "lost",
        "--gpu",
        "h100",
        "--gpus",
        "32",
        "--env",
        "DIVERGENT_STOP_GRACE=8",
        "--check",
        "saved==true",
        "train.py",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for k in 0..4 {
        world.wait_log("lost", Some(k), &["training"]);
    }
    let dir = world.run_dir("lost");
    let env = std::fs::read_to_string(dir.join("nodes/2/node.env")).expect("node 2's env");
    let field = |key: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {env}"))
            .to_owned()
    };
    let (host, pid_file) = (field("host"), field("slurmd_pid_file"));
    let killed = KilledSlurmd::kill(&host, &pid_file);
    let killed_at = Instant::now();
    // Noticed by div itself, within its bound (60 s of silence, a tick, and the grace): a
    // deadline on the wait, not a measured figure.
    let run = loop {
        let run = world.run_json("lost");
        if run["status"] != "running" {
            break run;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(120),
            "the lost node was not noticed within 120 s: {run}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(run["status"], "failed", "{run}");
    let reason = run["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "node 2 ({host}) was lost: its supervisor stopped reporting for "
        )),
        "{reason}"
    );
    // Billed until it was found lost, not for the grace after.
    let rate = run["cents_per_hour"].as_i64().expect("a rate");
    let seconds = run["duration_seconds"].as_i64().expect("a duration");
    let spent = run["spent_cents"].as_i64().expect("spent");
    assert!(spent <= cost(rate, seconds), "{run}");
    assert!(spent > 0, "{run}");
    // Every node still there was told, and saved; the result is judged.
    for k in [0, 1, 3] {
        let log = world.log("lost", Some(k));
        assert!(holds_lines(&log, &["saved"]), "node {k}:\n{log}");
    }
    assert_eq!(
        run["verdicts"][0]["line"], "check passed: saved == true (found true)",
        "{run}"
    );
    // The last line names the node and the cause; `div logs --follow` exits as `div run`.
    let logs = world.div(&["logs", "lost", "--follow"]);
    let stderr = text(&logs.stderr);
    assert_eq!(logs.status.code(), Some(209), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(" failed after ") && last.contains(&format!("node 2 ({host}) was lost")),
        "{last}"
    );
    // What is left of the job is cancelled, and once the node is back nothing runs again.
    drop(killed);
    let deadline = Instant::now() + PATIENCE;
    while !jobs_of(&run).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the job stays: {}",
            jobs_of(&run)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let again = world.run_json("lost");
    assert_eq!(again["status"], "failed", "{again}");
    for k in 0..4 {
        let log = world.log("lost", Some(k));
        assert_eq!(
            log.matches("\ntraining\n").count(),
            1,
            "node {k} ran twice:\n{log}"
        );
    }
}

/// How many times the 32-GPU ceiling run is tried: `DIV_FAULTS_CEILING_TRIES`, 5 by default
/// (docs/reliability.md has a run of 20).
fn ceiling_tries() -> usize {
    std::env::var("DIV_FAULTS_CEILING_TRIES")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(5)
}

#[test]
fn the_32_gpu_ceiling_run_hits_its_ceiling_every_time_with_each_nodes_handler_run() {
    let Some(world) = World::alone(Place::SlurmFourNodes) else {
        return;
    };
    world.slurm_toml(8);
    for i in 0..ceiling_tries() {
        let name = format!("ceiling-{i}");
        let out = world.div(&[
            "run",
            "--name",
            &name,
            "--gpu",
            "h100",
            "--gpus",
            "32",
            "--max-spend",
            "0.25",
            "--",
            "trap 'echo \"handler ran on node $NODE_RANK\"; exit 0' TERM; for i in $(seq 60); do echo tick $i; sleep 1; done",
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(205), "try {i}: {stderr}");
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains(" hit its $0.25 ceiling after "),
            "try {i}: {last}"
        );
        let run = world.run_json(&name);
        assert_eq!(run["status"], "hit_ceiling", "try {i}: {run}");
        assert!(
            run["spent_cents"].as_i64().is_some_and(|s| s <= 25),
            "{run}"
        );
        for k in 0..4 {
            let log = world.log(&name, Some(k));
            assert!(
                holds_lines(&log, &[&format!("handler ran on node {k}")]),
                "try {i}, node {k}:\n{log}"
            );
        }
    }
}

#[test]
fn a_run_waiting_while_an_outside_job_holds_the_nodes_is_queued_and_billed_nothing() {
    let Some(world) = World::alone(Place::SlurmOneNode) else {
        return;
    };
    // An outside job holds every GPU of every node.
    let out = Command::new("sbatch")
        .args([
            "--parsable",
            "--partition=gpu",
            "--nodes=4",
            "--gres=gpu:8",
            "--job-name=outside",
            "--output=/dev/null",
            "--wrap=sleep 600",
        ])
        .output()
        .expect("sbatch");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let outside = text(&out.stdout).trim().to_owned();
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).status();
        }
    }
    let outside = Cancel(outside);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = Command::new("squeue")
            .args(["-h", "-j", &outside.0, "-o", "%T"])
            .output()
            .expect("squeue");
        if text(&out.stdout).trim() == "RUNNING" {
            break;
        }
        assert!(Instant::now() < deadline, "the outside job never ran");
        std::thread::sleep(Duration::from_millis(250));
    }
    let out = world.div(&[
        "run", "--detach", "--name", "waits", "--gpu", "h100", "--gpus", "8", "--", "echo ran",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Pending in Slurm's queue: queued, and nothing billed, however often it is looked at.
    let waiting = world.wait_for("waits", "said it waits in Slurm's queue", |r| {
        r["queue"]["reason"]
            .as_str()
            .is_some_and(|q| q.starts_with("waiting in Slurm's queue (job "))
    });
    for _ in 0..5 {
        let run = world.run_json("waits");
        assert_eq!(run["status"], "queued", "{run}");
        assert_eq!(run["spent_cents"], 0, "{run}");
        assert!(run["started_at"].is_null(), "{run}");
        let listed = text(&world.div(&["runs"]).stdout);
        let line = listed
            .lines()
            .find(|l| l.starts_with("waits"))
            .unwrap_or_default()
            .to_owned();
        assert!(line.contains("queued") && line.contains("$0.00"), "{line}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let released = now_rfc3339();
    drop(outside);
    let run = world.wait_end("waits");
    assert_eq!(run["status"], "succeeded", "{run}\n{waiting}");
    // Billed from when Slurm started it, after the nodes were let go, and only for that.
    // Compared to the second: the API keeps milliseconds (`…:48.773Z`), Slurm's own start
    // time has seconds, and `date` here is read to the second.
    let started = run["started_at"].as_str().expect("it started");
    assert!(
        started.get(..19) >= released.get(..19),
        "{started} < {released}"
    );
    let rate = run["cents_per_hour"].as_i64().expect("a rate");
    let seconds = run["duration_seconds"].as_i64().expect("a duration");
    assert_eq!(
        run["spent_cents"].as_i64(),
        Some(cost(rate, seconds)),
        "{run}"
    );
}

/// Now as RFC 3339 to the second (`date -u`); the API writes milliseconds after it.
fn now_rfc3339() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date");
    text(&out.stdout).trim().to_owned()
}

#[test]
fn a_memory_below_the_gpus_share_is_refused_saying_what_each_node_is_asked_for() {
    let Some(world) = World::new(Place::SlurmOneNode) else {
        return;
    };
    // The partition `small`: one node with 4000 MB, less than the 8 GiB a GPU comes with.
    world.slurm_toml_on(8, "small");
    let out = world.div(&[
        "run", "--gpu", "h100", "--gpus", "1", "--memory", "1G", "--", "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("the Slurm cluster can never place this run (1 node(s) × 1 GPU(s), 1 cores and 8 GiB a node, partition small)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the 8 GiB a node is the most of `--memory` and what comes with the node's 1 GPU(s) (8 GiB each): a GPU run is never given less than its GPUs' share"),
        "{stderr}"
    );
    let runs = world.div(&["runs", "--json"]);
    assert_eq!(text(&runs.stdout).trim(), "[]", "nothing was created");
}

#[test]
fn a_controller_slower_than_the_deadline_as_the_server_starts_is_asked_again_and_the_run_runs() {
    let Some(world) = World::new(Place::SlurmOneNode) else {
        return;
    };
    // The controller as this `div`'s server sees it, held: its `sinfo` does not answer until
    // the test lets go (holding slurmctld itself would hold every other suite's runs too, and
    // `.ci/stress` runs one beside this). The real `sinfo` answers after.
    let real = Command::new("sh")
        .args(["-c", "command -v sinfo"])
        .output()
        .expect("sh");
    let real = text(&real.stdout).trim().to_owned();
    assert!(!real.is_empty(), "no sinfo on PATH");
    let bin = world.home().join("held-bin");
    let flags = world.home().join("held");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::create_dir_all(&flags).expect("flags");
    let script = bin.join("sinfo");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ ! -e '{f}/let-go' ]; then\n  echo $$ >> '{f}/asked'\n  while [ ! -e '{f}/let-go' ]; do sleep 0.1; done\nfi\nexec '{real}' \"$@\"\n",
            f = flags.display()
        ),
    )
    .expect("the held sinfo");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut div = world
        .command(&["run", "--gpu", "h100", "--", "sh", "-c", "echo bye; exit 3"])
        .env("PATH", &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("div runs");
    // Waits for the server to say it asks again (its first `sinfo` past the deadline and
    // killed), then lets the controller answer.
    let log = world.home().join("server.log");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("Slurm is slow to answer") {
            break;
        }
        if let Some(status) = div.try_wait().expect("div") {
            let out = div.wait_with_output().expect("div's output");
            panic!(
                "div ended ({status}) before its server asked Slurm again:\n{}\nserver.log:\n{said}",
                text(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "server.log:\n{said}");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(flags.join("let-go"), "").expect("let go");
    let out = div.wait_with_output().expect("div ends");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("div: Slurm job "), "{stdout}");
    assert!(holds_lines(&stdout, &["bye"]), "{stdout}");
    let asked = std::fs::read_to_string(flags.join("asked")).unwrap_or_default();
    assert!(!asked.trim().is_empty(), "the held sinfo was never asked");
}
