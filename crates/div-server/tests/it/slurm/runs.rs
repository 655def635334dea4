//! Runs placed on the cluster: what they get, and what is refused or waits.

use std::process::Command;
use std::time::Duration;

use div_test_support::wait_until;
use serde_json::json;

use super::{Cluster, PATIENCE, Scancel, cluster, merge, refusal, text};

#[tokio::test(flavor = "multi_thread")]
async fn a_one_gpu_run_with_checks_runs_on_slurm_and_the_health_names_the_cluster() {
    if !cluster() {
        return;
    }
    // This cluster's own price for an H100 hour, in place of the catalogue's $4.95.
    let c = Cluster::start_changed("[prices]\nh100 = \"$3.10\"\n", |_| {}).await;
    let code = c
        .server()
        .code(&[(
            "train.py",
            "import json, os\nprint('on', os.environ.get('CUDA_VISIBLE_DEVICES'))\njson.dump({'accuracy': 0.91}, open(os.environ['DIVERGENT_RESULT_PATH'], 'w'))\n",
        )])
        .await;
    let id = c
        .place(
            "python3 train.py",
            json!({"name": "one", "code": code, "checks": ["accuracy>=0.8"]}),
        )
        .await;
    let run = c.wait_end(&id).await;
    let log = c.server().log_text(&id).await;
    assert_eq!(run["status"], "succeeded", "{run}\n{log}");
    assert_eq!(run["exit_code"], 0, "{run}");
    assert!(log.contains("div: Slurm job "), "{log}");
    assert_eq!(
        run["cents_per_hour"], 310,
        "metered at the cluster's price: {run}"
    );
    // Slurm's one GPU: whichever of the node's eight it gave (another job may hold GPU 0).
    let gpu = log
        .lines()
        .find_map(|l| l.strip_prefix("on "))
        .unwrap_or_default();
    assert!(
        gpu.len() == 1 && gpu.bytes().all(|b| (b'0'..=b'7').contains(&b)),
        "Slurm's one GPU: {log}"
    );
    assert!(log.contains("check passed: accuracy >= 0.8"), "{log}");
    // What `div server status` shows as its executor.
    let (status, health) = c.server().request("GET", "/v1/health", None).await;
    assert_eq!(status, 200, "{health}");
    let executor = health["executor"].as_str().unwrap_or_default();
    assert!(
        executor.starts_with("slurm: partitions h100→gpu"),
        "{health}"
    );
    assert!(
        executor.contains("gpu: 4 nodes × 16 cpus, gpu:8"),
        "{health}"
    );
}

/// An image on Slurm: the node's supervisor runs the run in the image the server pulled and
/// unpacked into its cache (on the shared directory), as it does locally.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_an_image_runs_in_that_image_on_the_node() {
    if !cluster() {
        return;
    }
    let Some(reg) = crate::image::registry().await else {
        return;
    };
    let c = Cluster::start_changed("", crate::image::with_settings).await;
    let image = format!("{}/tools/busybox:1", reg.addr);
    let id = c
        .place(
            "cat /etc/os-release; pwd; echo \"$GREETING\"; echo \"rank=$DIVERGENT_NODE_RANK\"",
            json!({"image": image}),
        )
        .await;
    let run = c.wait_end(&id).await;
    let log = c.server().log_text(&id).await;
    assert_eq!(run["status"], "succeeded", "{run}\n{log}");
    assert!(
        log.contains(&format!("div: image {image} (sha256:")),
        "{log}"
    );
    // `/` is the image's, on the node: its os-release, working directory and Env.
    assert!(log.contains("ID=divtest"), "{log}");
    assert!(log.contains("\n/work\n"), "{log}");
    assert!(log.contains("hello from the image"), "{log}");
    assert!(log.contains("rank=0"), "{log}");
    // It ran as a Slurm job.
    let dir = c.run_dir(&id);
    assert!(
        std::fs::read_to_string(dir.join("nodes/0/node.env"))
            .is_ok_and(|t| t.lines().any(|l| l.starts_with("job="))),
        "no Slurm job for {}",
        dir.display()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_two_gpus_are_four_whole_nodes_each_with_its_rank_and_they_rendezvous() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    // What torchrun's static rendezvous does first: rank 0 listens on MASTER_ADDR:MASTER_PORT
    // and every other node connects to it and says its rank.
    let code = c
        .server()
        .code(&[
            (
                "ranks.sh",
                "echo \"node $NODE_RANK of $NNODES gpus=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR world=$WORLD_SIZE sky=$SKYPILOT_NODE_RANK dstack=$DSTACK_NODE_RANK\"\nexec python3 rendezvous.py\n",
            ),
            ("rendezvous.py", RENDEZVOUS),
        ])
        .await;
    let id = c
        .place(
            "sh ranks.sh",
            json!({"gpus": 32, "name": "wide", "code": code}),
        )
        .await;
    let run = c.wait_end(&id).await;
    let log = c.server().log_text(&id).await;
    assert_eq!(run["status"], "succeeded", "{run}\n{log}");
    // The run's log is rank 0's.
    assert!(
        log.contains("node 0 of 4 gpus=0,1,2,3,4,5,6,7 master=127.0.0.1 world=32 sky=0 dstack=0"),
        "{log}"
    );
    assert!(
        log.contains("rendezvous: ranks 1 2 3 joined rank 0"),
        "{log}"
    );
    let dir = c.run_dir(&id);
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

/// Each refusal comes from `POST /v1/runs/validate` (which `div run` asks before it uploads
/// anything) as from `POST /v1/runs`, and nothing is created: no run, no job.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_the_cluster_can_never_place_is_refused_before_anything_is_created() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let refused = |extra: serde_json::Value, words: &'static str| {
        let c = &c;
        async move {
            let mut body = json!({
                "project": "tests", "entrypoint": "true", "command": "true", "sku": "h100", "gpus": 1
            });
            merge(&mut body, extra.clone());
            let (status, validated) = c
                .server()
                .request("POST", "/v1/runs/validate", Some(body))
                .await;
            assert_eq!(status, 422, "{extra}: {validated}");
            assert!(refusal(&validated).contains(words), "{validated}");
            let mut create = json!({"sku": "h100"});
            merge(&mut create, extra);
            let created = c.server().create_run("true", create).await;
            assert_eq!(created, (422, validated), "as validate answered");
        }
    };
    // More GPUs than the partition has: refused from the catalogue (capacity 32).
    refused(json!({"gpus": 40}), "32 H100; the run asks for 40").await;
    // 40 cores on one node of 16: within the cluster's total, so only `sbatch --test-only`
    // can tell (Slurm would otherwise take it and leave it pending forever).
    refused(
        json!({"gpus": 8, "cpu": 40}),
        "the Slurm cluster can never place this run (1 node(s) × 8 GPU(s), 40 cores",
    )
    .await;
    refused(json!({"gpus": 12}), "ask for `--gpus 8` or `--gpus 16`").await;
    let (_, list) = c.server().request("GET", "/v1/runs", None).await;
    assert_eq!(list["runs"], json!([]), "nothing was created");
    let (_, volumes) = c.server().request("GET", "/v1/volumes", None).await;
    assert_eq!(volumes, json!({"volumes": []}), "nothing was created");
    assert!(c.jobs_listed().is_empty(), "no job was submitted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_node_fails_the_run_with_its_exit_code_and_last_lines() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let id = c
        .place(
            "if [ \"$NODE_RANK\" = 1 ]; then echo boom on one; exit 7; fi; sleep 120",
            json!({"gpus": 16, "name": "half"}),
        )
        .await;
    let run = c.wait_end(&id).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["exit_code"], 7, "{run}");
    let reason = run["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("node 1 failed with exit code 7: "),
        "{reason}"
    );
    assert!(reason.contains("boom on one"), "{reason}");
}

/// How long a placed run may take to say it waits in Slurm's queue.
const MINUTE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_run_shows_slurms_reason_in_its_log() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
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
    tokio::task::block_in_place(|| {
        wait_until("the blocking job running", PATIENCE, || {
            let state = Command::new("squeue")
                .args(["-h", "-j", &blocker, "-o", "%T"])
                .output()
                .expect("squeue runs");
            match text(&state.stdout).trim() {
                "RUNNING" => Ok(()),
                other => Err(other.to_owned()),
            }
        })
    });
    let id = c.place("echo placed at last", json!({})).await;
    c.wait_file_within(&id, "log", "div: waiting in Slurm's queue (job ", MINUTE)
        .await;
    // A second waiting run, stopped before it ever ran: canceled, nothing spent.
    let stopped = c.place("sleep 600", json!({})).await;
    c.wait_file_within(&stopped, "log", "div: waiting in Slurm's queue", MINUTE)
        .await;
    c.stop(&stopped).await;
    c.wait_for(&stopped, "ended canceled with nothing spent", |r| {
        r["status"] == "canceled" && r["spent_cents"] == 0
    })
    .await;
    drop(hold);
    c.wait_for(&id, "succeeded once the GPUs were free", |r| {
        r["status"] == "succeeded"
    })
    .await;
    let log = c.server().log_text(&id).await;
    assert!(log.contains("placed at last"), "{log}");
}

/// `GET /v1/runs/{id}/log?node=K`: node K's log of a multi-node run, followed while it runs
/// and read once it ended; the run's log stays rank 0's; a node the run does not have is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_log_is_that_nodes_and_a_node_that_is_not_there_is_refused() {
    if !cluster() {
        return;
    }
    let c = Cluster::start().await;
    let code = c
        .server()
        .code(&[(
            "hello.sh",
            "echo \"rank $NODE_RANK of $NNODES says hello\"\nsleep 2\necho \"rank $NODE_RANK done\"\n",
        )])
        .await;
    let id = c
        .place(
            "sh hello.sh",
            json!({"gpus": 32, "name": "nodes", "code": code}),
        )
        .await;
    let log = |node: Option<u32>, follow: bool| {
        let c = &c;
        let id = id.clone();
        async move {
            let node = node.map(|k| format!("&node={k}")).unwrap_or_default();
            let (status, bytes) = c
                .server()
                .try_request(
                    "GET",
                    &format!("/v1/runs/{id}/log?offset=0&follow={follow}{node}"),
                    None,
                    &[],
                )
                .await
                .expect("the log request went through");
            (status, bytes)
        }
    };
    // Followed from the start (the run may still wait in the queue) to the run's end.
    let (status, bytes) = log(Some(2), true).await;
    let followed = crate::harness::decode_chunks(&bytes);
    assert_eq!(status, 200, "{}", text(&bytes));
    assert!(followed.contains("rank 2 of 4 says hello"), "{followed}");
    assert!(followed.contains("rank 2 done"), "{followed}");
    assert!(!followed.contains("rank 0"), "{followed}");
    let run = c.wait_end(&id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    // Once ended, without following.
    let (status, bytes) = log(Some(3), false).await;
    let read = crate::harness::decode_chunks(&bytes);
    assert_eq!(status, 200, "{}", text(&bytes));
    assert!(
        read.contains("rank 3 of 4 says hello") && read.contains("rank 3 done"),
        "{read}"
    );
    // The run's log is rank 0's, as before.
    let whole = c.server().log_text(&id).await;
    assert!(whole.contains("rank 0 of 4 says hello"), "{whole}");
    assert!(!whole.contains("rank 2"), "{whole}");
    // A node the run does not have.
    let (status, bytes) = log(Some(4), false).await;
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    assert_eq!(status, 404, "{}", text(&bytes));
    assert!(
        refusal(&body).contains("run `nodes` has 4 nodes (0–3): there is no node 4"),
        "{body}"
    );
}
