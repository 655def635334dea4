//! Runs placed on the cluster: what they get, and what is refused or waits.

use std::process::Command;
use std::time::Duration;

use div_test_support::wait_until;

use super::{Cluster, PATIENCE, Scancel, cluster, detach, text};

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
