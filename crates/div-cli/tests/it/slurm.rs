//! End to end on a real Slurm cluster: the real `div`, its local control plane with
//! `home/slurm.toml`, and the loopback cluster `.ci/slurm-up` brings up (4 nodes × 8 fake
//! GPUs). Each test skips, loudly, when no cluster answers (`sinfo` fails).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use div_test_support::wait_until;

use crate::support::DIV;

/// How long a test waits for the cluster (at most 3 minutes: it may be busy with the other
/// tests).
const PATIENCE: Duration = Duration::from_secs(180);

/// Whether a Slurm cluster answers here (asked once, within 10 s: `sinfo` retries a missing
/// configuration for a minute); says so loudly when not.
fn cluster() -> bool {
    static ANSWERS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *ANSWERS.get_or_init(|| {
        Command::new("timeout")
            .args(["10", "sinfo", "-h"])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
    });
    if !ok {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "\n!!!!! SKIPPED: no Slurm cluster answers here (`sinfo -h` failed); `.ci/slurm-up` brings one up (as root) !!!!!\n"
            );
        }
    }
    ok
}

/// A temp shared directory holding the state directory (with its `slurm.toml`) and a project.
struct Cluster {
    tmp: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let home = tmp.path().join("div-home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::create_dir_all(tmp.path().join("project")).expect("project");
        std::fs::write(tmp.path().join("project/README"), "a project\n").expect("a file to ship");
        std::fs::write(
            home.join("slurm.toml"),
            format!(
                "shared_dir = \"{}\"\ngres = \"gpu\"\ngpus_per_node = 8\ngrace_seconds = 2\n[partitions]\nh100 = \"gpu\"\n",
                tmp.path().display()
            ),
        )
        .expect("slurm.toml");
        Cluster { tmp }
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.tmp.path().join("project").join(name), text).expect("write");
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(DIV);
        c.args(args)
            .current_dir(self.tmp.path().join("project"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.home())
            .env("NO_COLOR", "1");
        if let Some(conf) = std::env::var_os("SLURM_CONF") {
            c.env("SLURM_CONF", conf);
        }
        c
    }

    fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// The run's record, as `div runs --json` has it.
    fn run_json(&self, name: &str) -> serde_json::Value {
        let out = self.div(&["runs", "--json"]);
        let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs as JSON");
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    }

    /// Waits (at most [`PATIENCE`]) until `check` holds of the run.
    fn wait_for(&self, name: &str, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
        wait_until(format!("{name} {what}"), PATIENCE, || {
            let run = self.run_json(name);
            if check(&run) { Ok(()) } else { Err(run) }
        });
    }

    fn run_dir(&self, name: &str) -> PathBuf {
        let id = self.run_json(name)["id"]
            .as_str()
            .expect("the run has an id")
            .to_owned();
        self.home().join("runs").join(id)
    }

    /// The run's Slurm job, once its batch script wrote a node's env.
    fn job(&self, name: &str) -> String {
        let dir = self.run_dir(name);
        wait_until(format!("{name}'s job started"), PATIENCE, || {
            let text = std::fs::read_to_string(dir.join("nodes/0/node.env")).unwrap_or_default();
            match text.lines().find_map(|l| l.strip_prefix("job=")) {
                Some(job) => Ok(job.to_owned()),
                None => Err(text),
            }
        })
    }
}

/// Its runs stopped (their jobs with them), then its server, when the test ends.
impl Drop for Cluster {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn detach(c: &Cluster, args: &[&str]) -> String {
    let mut all = vec!["run", "--detach"];
    all.extend(args);
    let out = c.div(&all);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

#[test]
fn a_one_gpu_run_with_checks_runs_on_slurm_and_the_status_names_the_cluster() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    // This cluster's own price for an H100 hour, in place of the catalogue's $4.95.
    let toml = c.home().join("slurm.toml");
    let mut settings = std::fs::read_to_string(&toml).expect("slurm.toml");
    settings.push_str("[prices]\nh100 = \"$3.10\"\n");
    std::fs::write(&toml, settings).expect("slurm.toml");
    c.write(
        "train.py",
        "import json, os\nprint('on', os.environ.get('CUDA_VISIBLE_DEVICES'))\njson.dump({'accuracy': 0.91}, open(os.environ['DIVERGENT_RESULT_PATH'], 'w'))\n",
    );
    let out = c.div(&[
        "run",
        "--name",
        "one",
        "--gpu",
        "h100",
        "--check",
        "accuracy>=0.8",
        "--",
        "python3",
        "train.py",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("div: Slurm job "), "{stdout}");
    assert!(stderr.contains("H100  $3.10/h"), "{stderr}");
    let run = c.run_json("one");
    assert_eq!(
        run["cents_per_hour"], 310,
        "metered at the cluster's price: {run}"
    );
    // Slurm's one GPU: whichever of the node's eight it gave (another job may hold GPU 0).
    let gpu = stdout
        .lines()
        .find_map(|l| l.strip_prefix("on "))
        .unwrap_or_default();
    assert!(
        gpu.len() == 1 && gpu.bytes().all(|b| (b'0'..=b'7').contains(&b)),
        "Slurm's one GPU: {stdout}"
    );
    assert!(stdout.contains("check passed: accuracy >= 0.8"), "{stdout}");
    let status = c.div(&["server", "status"]);
    let status = text(&status.stdout) + &text(&status.stderr);
    assert!(
        status.contains("executor  slurm: partitions h100→gpu"),
        "{status}"
    );
    assert!(status.contains("gpu: 4 nodes × 16 cpus, gpu:8"), "{status}");
}

#[test]
fn a_run_that_exits_3_makes_div_exit_3() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let out = c.div(&["run", "--gpu", "h100", "--", "sh", "-c", "echo bye; exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("bye"));
}

/// An image on Slurm: the node's supervisor runs the run in the image the server pulled and
/// unpacked into its cache (on the shared directory), as it does locally.
#[test]
fn a_run_with_an_image_runs_in_that_image_on_the_node() {
    if !cluster() {
        return;
    }
    let Some(reg) = crate::image::registry() else {
        return;
    };
    let c = Cluster::new();
    let image = format!("{}/tools/busybox:1", reg.addr);
    let out = c.div(&[
        "run",
        "--gpu",
        "h100",
        "--image",
        &image,
        "--no-upload",
        "--",
        "cat /etc/os-release; pwd; echo \"$GREETING\"; echo \"rank=$DIVERGENT_NODE_RANK\"",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("div: image {image} (sha256:")),
        "{stdout}"
    );
    // `/` is the image's, on the node: its os-release, working directory and Env.
    assert!(stdout.contains("ID=divtest"), "{stdout}");
    assert!(stdout.contains("\n/work\n"), "{stdout}");
    assert!(stdout.contains("hello from the image"), "{stdout}");
    assert!(stdout.contains("rank=0"), "{stdout}");
    // It ran as a Slurm job.
    let runs: serde_json::Value =
        serde_json::from_slice(&c.div(&["runs", "--json"]).stdout).expect("runs as JSON");
    let name = runs[0]["name"].as_str().expect("the run").to_owned();
    let dir = c.run_dir(&name);
    assert!(
        std::fs::read_to_string(dir.join("nodes/0/node.env"))
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("job="))),
        "no Slurm job for {}",
        dir.display()
    );
}

#[test]
fn thirty_two_gpus_are_four_whole_nodes_each_with_its_rank_and_they_rendezvous() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    c.write(
        "ranks.sh",
        "echo \"node $NODE_RANK of $NNODES gpus=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR world=$WORLD_SIZE sky=$SKYPILOT_NODE_RANK dstack=$DSTACK_NODE_RANK\"\nexec python3 rendezvous.py\n",
    );
    // What torchrun's static rendezvous does first: rank 0 listens on MASTER_ADDR:MASTER_PORT
    // and every other node connects to it and says its rank.
    c.write("rendezvous.py", RENDEZVOUS);
    let out = c.div(&[
        "run", "--gpu", "h100", "--gpus", "32", "--name", "wide", "--", "sh", "ranks.sh",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    // The run's log is rank 0's.
    assert!(
        stdout
            .contains("node 0 of 4 gpus=0,1,2,3,4,5,6,7 master=127.0.0.1 world=32 sky=0 dstack=0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rendezvous: ranks 1 2 3 joined rank 0"),
        "{stdout}"
    );
    let dir = c.run_dir("wide");
    for k in 1..4 {
        let log =
            std::fs::read_to_string(dir.join(format!("nodes/{k}/log"))).expect("a node's log");
        assert!(
            log.contains(&format!("node {k} of 4 gpus=0,1,2,3,4,5,6,7")),
            "{log}"
        );
        assert!(log.contains(&format!("rank {k} joined")), "{log}");
    }
}

const RENDEZVOUS: &str = r#"import os, socket, sys, time
rank, nodes = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(nodes)
    s.settimeout(120)
    joined = sorted(int(s.accept()[0].recv(16)) for _ in range(nodes - 1))
    print("rendezvous: ranks", " ".join(map(str, joined)), "joined rank 0", flush=True)
else:
    for _ in range(600):
        try:
            c = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            time.sleep(0.2)
    else:
        sys.exit("rank %d never reached %s:%d" % (rank, addr, port))
    c.sendall(str(rank).encode())
    print("rank %d joined" % rank, flush=True)
"#;

#[test]
fn a_request_the_cluster_can_never_place_is_refused_before_anything_is_created() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    // Nothing was uploaded: no code volume (`project-code`), no snapshot on disk; each refusal
    // prints as `POST /v1/runs`'s, which `POST /v1/runs/validate` answers before the upload.
    let nothing_uploaded = |stderr: &str| {
        let volumes = c.div(&["storage", "ls"]);
        assert!(volumes.status.success(), "{}", text(&volumes.stderr));
        assert!(
            !text(&volumes.stdout).contains("project-code"),
            "the code was uploaded before the refusal: {}\n{stderr}",
            text(&volumes.stdout)
        );
        assert!(
            !c.home().join("volumes/project-code/code").exists(),
            "a code snapshot was made before the refusal: {stderr}"
        );
        assert!(!stderr.contains(" → project-code/"), "{stderr}");
    };
    // More GPUs than the partition has: refused from the catalogue (capacity 32).
    let out = c.div(&["run", "--gpu", "h100", "--gpus", "40", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(stderr.contains("32 H100; the run asks for 40"), "{stderr}");
    nothing_uploaded(&stderr);
    // 40 cores on one node of 16: within the cluster's total, so only `sbatch --test-only`
    // can tell (Slurm would otherwise take it and leave it pending forever).
    let out = c.div(&[
        "run", "--gpu", "h100", "--gpus", "8", "--cpu", "40", "--", "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr
            .contains("the Slurm cluster can never place this run (1 node(s) × 8 GPU(s), 40 cores"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: could not place the run\n"),
        "{stderr}"
    );
    nothing_uploaded(&stderr);
    let out = c.div(&["run", "--gpu", "h100", "--gpus", "12", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(200), "{stderr}");
    assert!(
        stderr.contains("ask for `--gpus 8` or `--gpus 16`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: could not place the run\n"),
        "{stderr}"
    );
    nothing_uploaded(&stderr);
    let runs = c.div(&["runs", "--json"]);
    assert_eq!(text(&runs.stdout).trim(), "[]", "nothing was created");
}

#[test]
fn a_failing_node_fails_the_run_with_its_exit_code_and_last_lines() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let out = c.div(&[
        "run",
        "--gpu",
        "h100",
        "--gpus",
        "16",
        "--name",
        "half",
        "--",
        "sh",
        "-c",
        "if [ \"$NODE_RANK\" = 1 ]; then echo boom on one; exit 7; fi; sleep 120",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let run = c.run_json("half");
    assert_eq!(run["status"], "failed");
    let reason = run["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("node 1 failed with exit code 7: "),
        "{reason}"
    );
    assert!(reason.contains("boom on one"), "{reason}");
}

#[test]
fn a_small_ceiling_is_hit_and_never_overspent() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let out = c.div(&[
        "run",
        "--gpu",
        "h100",
        "--max-spend",
        "0.01",
        "--name",
        "cap",
        "--",
        "sleep",
        "600",
    ]);
    assert_eq!(out.status.code(), Some(205), "{}", text(&out.stderr));
    let run = c.run_json("cap");
    assert_eq!(run["status"], "hit_ceiling");
    assert!(run["spent_cents"].as_i64().is_some_and(|s| s <= 1), "{run}");
}

/// The ceiling is also the job's own `--time` (what it buys, plus a minute so div's stop comes
/// first): Slurm holds the limit itself, and enforces it even while div-server is down.
#[test]
fn the_jobs_time_limit_is_what_the_ceiling_buys_so_slurm_holds_it_too() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &["--gpu", "h100", "--max-spend", "1", "--", "sleep", "600"],
    );
    let job = c.job(&name);
    let run = c.run_json(&name);
    let cents_per_hour = run["cents_per_hour"].as_u64().expect("a rate");
    let buys_seconds = (100 * 3600u64).div_ceil(cents_per_hour);
    let minutes = buys_seconds.div_ceil(60) + 1;
    assert!(minutes < 24 * 60, "{run}");
    let shown = Command::new("scontrol")
        .args(["show", "job", "-o", &job])
        .output()
        .expect("scontrol runs");
    let shown = text(&shown.stdout);
    let want = format!("TimeLimit={:02}:{:02}:00", minutes / 60, minutes % 60);
    assert!(shown.contains(&want), "{want} in {shown}");
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
}

#[test]
fn div_stop_cancels_a_run_on_slurm() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(&c, &["--gpu", "h100", "--", "sleep", "600"]);
    c.job(&name);
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
}

#[test]
fn div_stop_on_slurm_gives_the_run_its_sigterm_and_grace_to_write_its_result() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &[
            "--gpu",
            "h100",
            "--check",
            "epoch>=18",
            "--env",
            "DIVERGENT_STOP_GRACE=5",
            "--",
            "trap 'echo \"{\\\"epoch\\\": 18}\" > \"$DIVERGENT_RESULT_PATH\"; echo saved; exit 0' TERM; echo started; while :; do sleep 0.05; done",
        ],
    );
    c.job(&name);
    let log = c.run_dir(&name).join("nodes/0/log");
    wait_until(format!("{name} started"), PATIENCE, || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("started\n") {
            Ok(())
        } else {
            Err(text)
        }
    });
    let out = c.div(&["stop", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| r["status"] == "canceled");
    let run = c.run_json(&name);
    let node_log = std::fs::read_to_string(&log).expect("node 0's log");
    assert!(
        node_log.contains("div: it was asked to stop: SIGTERM sent to the run; SIGKILL in 5 s if it has not exited\n"),
        "{node_log}"
    );
    assert!(node_log.contains("\nsaved\n"), "{node_log}");
    assert_eq!(
        run["verdicts"][0]["line"], "check passed: epoch >= 18 (found 18)",
        "{run}"
    );
}

#[test]
fn scancel_outside_div_ends_the_run_canceled_with_its_spend() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(&c, &["--gpu", "h100", "--", "sleep", "600"]);
    let job = c.job(&name);
    let out = Command::new("scancel")
        .arg(&job)
        .output()
        .expect("scancel runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait_for(&name, "ended canceled", |r| {
        r["status"] == "canceled" && r["spent_cents"].is_i64()
    });
}

#[test]
fn a_server_killed_mid_job_reconciles_when_it_starts_again() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    let name = detach(
        &c,
        &[
            "--gpu",
            "h100",
            "--",
            "sh",
            "-c",
            "sleep 3; echo survived; exit 4",
        ],
    );
    c.job(&name);
    let pid: i32 = std::fs::read_to_string(c.home().join("server.pid"))
        .expect("server.pid")
        .trim()
        .parse()
        .expect("a pid");
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    // `div runs` starts it again; it reads the job's end from the run directory.
    c.wait_for(&name, "reconciled as failed with exit 4", |r| {
        r["status"] == "failed" && r["exit_code"] == 4
    });
    let out = c.div(&["logs", &name]);
    assert!(
        text(&out.stdout).contains("survived"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_waiting_run_shows_slurms_reason_in_its_log() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    // Hold every GPU of the cluster with a job of our own, running before the run is placed.
    let blocker = Command::new("sbatch")
        .args([
            "--parsable",
            "--nodes=4",
            "--gres=gpu:8",
            "--output=/dev/null",
            "--wrap=sleep 300",
        ])
        .output()
        .expect("sbatch runs");
    assert!(blocker.status.success(), "{}", text(&blocker.stderr));
    let blocker = text(&blocker.stdout).trim().to_owned();
    let hold = Scancel(blocker.clone());
    wait_until("the blocking job running", PATIENCE, || {
        let state = Command::new("squeue")
            .args(["-h", "-j", &blocker, "-o", "%T"])
            .output()
            .expect("squeue runs");
        match text(&state.stdout).trim() {
            "RUNNING" => Ok(()),
            other => Err(other.to_owned()),
        }
    });
    let name = detach(&c, &["--gpu", "h100", "--", "echo", "placed at last"]);
    let log = c.run_dir(&name).join("log");
    wait_until(
        format!("{name} waiting in the queue"),
        Duration::from_secs(60),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            match text.contains("div: waiting in Slurm's queue (job ") {
                true => Ok(()),
                false => Err(text),
            }
        },
    );
    // A second waiting run, stopped before it ever ran: canceled, nothing spent.
    let stopped = detach(&c, &["--gpu", "h100", "--", "sleep", "600"]);
    let log = c.run_dir(&stopped).join("log");
    wait_until(
        format!("{stopped} waiting in the queue"),
        Duration::from_secs(60),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            match text.contains("div: waiting in Slurm's queue") {
                true => Ok(()),
                false => Err(text),
            }
        },
    );
    let out = c.div(&["stop", &stopped]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    c.wait_for(&stopped, "ended canceled with nothing spent", |r| {
        r["status"] == "canceled" && r["spent_cents"] == 0
    });
    drop(hold);
    c.wait_for(&name, "succeeded once the GPUs were free", |r| {
        r["status"] == "succeeded"
    });
    let out = c.div(&["logs", &name]);
    assert!(
        text(&out.stdout).contains("placed at last"),
        "{}",
        text(&out.stdout)
    );
}

/// Cancels a Slurm job when dropped, so a failing test leaves nothing holding the cluster.
struct Scancel(String);

impl Drop for Scancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}

/// `div logs RUN --node K`: node K's log of a multi-node run, followed while it runs and read
/// once it ended; the run's log stays rank 0's; a node the run does not have is refused.
#[test]
fn div_logs_node_shows_that_nodes_log_and_refuses_a_node_that_is_not_there() {
    if !cluster() {
        return;
    }
    let c = Cluster::new();
    c.write(
        "hello.sh",
        "echo \"rank $NODE_RANK of $NNODES says hello\"\nsleep 2\necho \"rank $NODE_RANK done\"\n",
    );
    let name = detach(
        &c,
        &[
            "--gpu", "h100", "--gpus", "32", "--name", "nodes", "--", "sh", "hello.sh",
        ],
    );
    assert_eq!(name, "nodes");
    // Followed from the start (the run may still wait in the queue) to the run's end.
    let out = c.div(&["logs", "nodes", "--node", "2", "--follow"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("rank 2 of 4 says hello"), "{stdout}");
    assert!(stdout.contains("rank 2 done"), "{stdout}");
    assert!(!stdout.contains("rank 0"), "{stdout}");
    // Once ended, without --follow.
    let out = c.div(&["logs", "nodes", "--node", "3"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains("rank 3 of 4 says hello") && stdout.contains("rank 3 done"),
        "{stdout}"
    );
    // The run's log is rank 0's, as before.
    let out = c.div(&["logs", "nodes"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("rank 0 of 4 says hello"), "{stdout}");
    assert!(!stdout.contains("rank 2"), "{stdout}");
    // A node the run does not have.
    let out = c.div(&["logs", "nodes", "--node", "4"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("run `nodes` has 4 nodes (0–3): there is no node 4"),
        "{stderr}"
    );
}
