//! The Slurm executor's own tests: placement, time limits, parsing, the node's side.

use super::cluster::{parse_sinfo, parse_squeue};
use super::node::{gather_ends, node_spec, node_vars, parse_node_env};
use super::*;
use div_api::RunStatus;
use div_runtime::supervisor::EndRecord;

fn config() -> SlurmConfig {
    SlurmConfig {
        shared_dir: PathBuf::from("/shared"),
        gres: "gpu".to_owned(),
        gpus_per_node: 8,
        grace_seconds: 10,
        div: None,
        partitions: BTreeMap::from([("h100".to_owned(), "gpu".to_owned())]),
        prices: BTreeMap::new(),
    }
}

fn place(gpus: u32, cores: u32, memory_gib: u32) -> Result<Shape, String> {
    shape(
        &config(),
        &Placement {
            sku: "h100",
            gpus,
            cores,
            memory_gib,
        },
    )
    .map_err(|e| e.to_string())
}

#[test]
fn up_to_a_node_is_one_node_and_past_it_whole_nodes() {
    let one = place(3, 3, 24).expect("fits");
    assert_eq!((one.nodes, one.gpus_per_node, one.cpus_per_node), (1, 3, 3));
    let four = place(32, 32, 256).expect("fits");
    assert_eq!(
        (
            four.nodes,
            four.gpus_per_node,
            four.cpus_per_node,
            four.memory_gib_per_node
        ),
        (4, 8, 8, 64)
    );
    assert_eq!(
        resource_args(&config(), &four),
        [
            "--partition=gpu",
            "--nodes=4",
            "--ntasks-per-node=1",
            "--cpus-per-task=8",
            "--mem=64G",
            "--gres=gpu:8"
        ]
    );
    // Cores and memory split evenly, rounded up.
    let odd = place(16, 17, 129).expect("fits");
    assert_eq!((odd.cpus_per_node, odd.memory_gib_per_node), (9, 65));
    let e = place(12, 12, 96).expect_err("not whole nodes");
    assert!(e.contains("ask for `--gpus 8` or `--gpus 16`"), "{e}");
    let e = shape(
        &config(),
        &Placement {
            sku: "h200",
            gpus: 1,
            cores: 1,
            memory_gib: 8,
        },
    )
    .expect_err("no partition")
    .to_string();
    assert!(
        e.contains("no partition for `h200`") && e.contains("it takes h100"),
        "{e}"
    );
}

#[test]
fn the_time_limit_is_what_the_ceiling_buys_capped_at_a_day_plus_a_minute() {
    // $0.01 at $4.95/h buys 7.3 s: one minute, plus the margin.
    assert_eq!(time_minutes(495, Some(1), 86_400), 2);
    // $15 at $158.40/h buys 341 s: 6 minutes, plus the margin.
    assert_eq!(time_minutes(15_840, Some(1_500), 86_400), 7);
    // No ceiling, or one past a day: the day.
    assert_eq!(time_minutes(495, None, 86_400), 1_441);
    assert_eq!(time_minutes(495, Some(1_000_000), 86_400), 1_441);
}

#[test]
fn sinfo_and_squeue_are_read_by_their_fields() {
    let parts = parse_sinfo(
        "gpu*|3|16|gpu:8|idle\ngpu*|1|16|gpu:h100:8(S:0-1),shard:4|mixed\ncpu|2|64|(null)|idle\n",
        "gpu",
    );
    assert_eq!(parts.len(), 2);
    assert_eq!(
        (
            parts[0].name.as_str(),
            parts[0].nodes,
            parts[0].gres_per_node
        ),
        ("gpu", 4, 8)
    );
    assert_eq!(parts[0].states, "3 idle, 1 mixed");
    assert_eq!((parts[1].nodes, parts[1].gres_per_node), (2, 0));
    let jobs = parse_squeue("12|PENDING|Resources\n13|RUNNING|None\nnot a job\n");
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[&12].reason, "Resources");
    assert_eq!(jobs[&13].state, "RUNNING");
}

#[test]
fn a_node_gets_its_rank_and_the_addresses_under_every_anchor_name() {
    let node = parse_node_env(
        "rank=2\nnodes=4\naddrs=10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4\nhosts=a,b,c,d\ncuda=0,1,2,3,4,5,6,7\njob=2077\nhost=c\n",
    );
    let vars: BTreeMap<String, String> = node_vars(&node).into_iter().collect();
    for (k, v) in [
        ("DIVERGENT_NODE_RANK", "2"),
        ("SKYPILOT_NODE_RANK", "2"),
        ("DSTACK_NODE_RANK", "2"),
        ("NODE_RANK", "2"),
        ("SKYPILOT_NUM_NODES", "4"),
        ("DSTACK_NODES_NUM", "4"),
        ("NNODES", "4"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("DSTACK_MASTER_NODE_IP", "10.0.0.1"),
        ("MASTER_PORT", "29577"),
        ("WORLD_SIZE", "32"),
        (
            "SKYPILOT_NODE_IPS",
            "10.0.0.1\n10.0.0.2\n10.0.0.3\n10.0.0.4",
        ),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),
    ] {
        assert_eq!(vars.get(k).map(String::as_str), Some(v), "{k}");
    }
}

fn end(status: RunStatus, code: Option<i32>, ended_ms: u64, spent: i64) -> EndRecord {
    EndRecord {
        status,
        exit_code: code,
        reason: None,
        started_ms: 1_000,
        ended_ms,
        duration_seconds: (ended_ms - 1_000) / 1000,
        spent_cents: spent,
        verdicts: Vec::new(),
    }
}

#[test]
fn a_run_slurm_killed_before_any_node_wrote_its_end_is_gathered_canceled() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    std::fs::write(run.join("slurm.json"), r#"{"nodes": 1, "job": 9}"#).unwrap();
    std::fs::create_dir_all(run.join("nodes/0")).unwrap();
    std::fs::write(run.join("nodes/0/node.env"), "rank=0\n").unwrap();
    std::fs::write(run.join("slurm.signaled"), "").unwrap();
    assert!(!super::all_nodes_ended(run));
    assert_eq!(super::node_or_gather(run), Some(0));
    let end: EndRecord =
        serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
    assert_eq!(end.status, RunStatus::Canceled);
    assert_eq!(end.exit_code, None);
    assert_eq!(
        end.reason.as_deref(),
        Some("canceled in Slurm (scancel, or the job's time limit)")
    );
}

#[test]
fn a_run_whose_nodes_all_ended_is_gathered_once_whoever_gathers_first() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    std::fs::write(run.join("slurm.json"), r#"{"nodes": 2, "job": 7}"#).unwrap();
    std::fs::write(run.join("log"), "").unwrap();
    for k in 0..2 {
        std::fs::create_dir_all(run.join("nodes").join(k.to_string())).unwrap();
    }
    let write_end = |k: u32, e: &EndRecord| {
        let path = run.join("nodes").join(k.to_string()).join("end.json");
        std::fs::write(path, serde_json::to_vec(e).unwrap()).unwrap();
    };
    // Node 1 failed; node 0 still runs: not over yet.
    write_end(1, &end(RunStatus::Failed, Some(3), 5_000, 2));
    assert!(!super::all_nodes_ended(run));
    write_end(0, &end(RunStatus::Canceled, None, 6_000, 3));
    assert!(super::all_nodes_ended(run));
    // The server gathers first (srun has not exited: no slurm.exit).
    assert_eq!(super::node_or_gather(run), Some(0));
    let gathered: EndRecord =
        serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
    assert_eq!(gathered.status, RunStatus::Failed);
    assert_eq!(gathered.exit_code, Some(3));
    let log = std::fs::read_to_string(run.join("log")).unwrap();
    assert!(log.contains("div: node 1 failed with exit code 3"), "{log}");
    // The batch script's gather, after srun, finds it done: nothing written again.
    std::fs::write(run.join("slurm.exit"), "1\n").unwrap();
    std::fs::write(run.join("slurm.signaled"), "").unwrap();
    assert_eq!(super::node_or_gather(run), Some(0));
    let again: EndRecord =
        serde_json::from_slice(&std::fs::read(run.join("end.json")).unwrap()).unwrap();
    assert_eq!(
        (again.status, again.exit_code, again.reason),
        (gathered.status, gathered.exit_code, gathered.reason)
    );
    assert_eq!(std::fs::read_to_string(run.join("log")).unwrap(), log);
    // A run with no job file is never taken for ended.
    assert!(!super::all_nodes_ended(dir.path().join("nodes").as_path()));
}

#[test]
fn the_first_node_to_fail_is_the_runs_cause() {
    let ends = vec![
        (
            0,
            Some(end(RunStatus::Failed, Some(143), 9_000, 5)),
            "Terminated".to_owned(),
        ),
        (
            1,
            Some(end(RunStatus::Failed, Some(7), 8_000, 4)),
            "boom".to_owned(),
        ),
        (
            2,
            Some(end(RunStatus::Succeeded, Some(0), 9_500, 6)),
            String::new(),
        ),
    ];
    let e = gather_ends(&ends, "srun exited 1", None);
    assert_eq!(e.status, RunStatus::Failed);
    assert_eq!(e.exit_code, Some(7));
    assert_eq!(
        e.reason.as_deref(),
        Some("node 1 failed with exit code 7: boom")
    );
    assert_eq!((e.spent_cents, e.ended_ms), (6, 9_500));
}

/// srun stops the other nodes when one fails; one killed before its supervisor wrote its
/// end (seen once in the suite under load: `srun exited 143`) is not the cause.
#[test]
fn a_node_that_failed_is_the_cause_over_one_srun_killed_before_its_end() {
    let ends = vec![
        (0, None, String::new()),
        (
            1,
            Some(end(RunStatus::Failed, Some(7), 8_000, 4)),
            "boom".to_owned(),
        ),
    ];
    let e = gather_ends(&ends, "srun exited 143", None);
    assert_eq!(e.status, RunStatus::Failed);
    assert_eq!(e.exit_code, Some(7));
    assert_eq!(
        e.reason.as_deref(),
        Some("node 1 failed with exit code 7: boom")
    );
}

/// Under the control plane's decision the run ends as decided: a node that another's
/// end killed (failed, after the decision) or one that is gone (no end) does not change
/// it; a node that failed on its own before the decision still fails the run.
#[test]
fn a_decided_end_holds_over_the_nodes_it_ended_but_not_over_a_failure_before_it() {
    let decided = Decision {
        why: Why::Ceiling,
        reason: None,
        line: "div: ceiling".to_owned(),
        decided_ms: 5_000,
        kill_at_ms: 7_000,
        spend_until_ms: None,
    };
    let ends = vec![
        (
            0,
            Some(end(RunStatus::HitCeiling, None, 6_000, 3)),
            String::new(),
        ),
        (
            1,
            Some(end(RunStatus::Failed, Some(143), 6_500, 3)),
            "Terminated".to_owned(),
        ),
        (2, None, String::new()),
    ];
    let e = gather_ends(&ends, "srun exited 143", Some(&decided));
    assert_eq!((e.status, e.exit_code), (RunStatus::HitCeiling, None));
    let mut before = ends.clone();
    before[1].1 = Some(end(RunStatus::Failed, Some(3), 4_000, 2));
    let e = gather_ends(&before, "srun exited 1", Some(&decided));
    assert_eq!((e.status, e.exit_code), (RunStatus::Failed, Some(3)));
    let lost = Decision {
        why: Why::Lost,
        reason: Some("node 2 (n3) was lost: its supervisor stopped reporting for 60 s".to_owned()),
        ..decided
    };
    let e = gather_ends(&ends, "srun did not finish", Some(&lost));
    assert_eq!(e.status, RunStatus::Failed);
    assert_eq!(e.reason, lost.reason);
}

#[test]
fn a_node_without_an_end_fails_the_run_and_all_well_is_success() {
    let ends = vec![
        (
            0,
            Some(end(RunStatus::Succeeded, Some(0), 2_000, 1)),
            String::new(),
        ),
        (1, None, String::new()),
    ];
    let e = gather_ends(&ends, "srun exited 1", None);
    assert_eq!(e.status, RunStatus::Failed);
    assert_eq!(
        e.reason.as_deref(),
        Some("node 1 ended without writing its end (srun exited 1)")
    );
    let ok = vec![
        (
            0,
            Some(end(RunStatus::Succeeded, Some(0), 2_000, 1)),
            String::new(),
        ),
        (
            1,
            Some(end(RunStatus::Succeeded, Some(0), 2_100, 1)),
            String::new(),
        ),
    ];
    assert_eq!(gather_ends(&ok, "", None).status, RunStatus::Succeeded);
    let cap = vec![
        (
            0,
            Some(end(RunStatus::HitCeiling, None, 2_000, 3)),
            String::new(),
        ),
        (
            1,
            Some(end(RunStatus::Canceled, None, 2_100, 3)),
            String::new(),
        ),
    ];
    assert_eq!(gather_ends(&cap, "", None).status, RunStatus::HitCeiling);
}

#[test]
fn a_node_spec_binds_the_nodes_own_gpus_and_meters_from_its_start() {
    let spec = RunSpec {
        run_id: "r_x-n0".to_owned(),
        run_name: "x".to_owned(),
        argv: [
            "bwrap",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--dev-bind",
            "/dev/nvidia9",
            "/dev/nvidia9",
            "--chdir",
            "/",
            "sh",
            "-lc",
            "true",
        ]
        .map(str::to_owned)
        .to_vec(),
        cwd: PathBuf::from("/"),
        env: vec![("CUDA_VISIBLE_DEVICES".to_owned(), "5".to_owned())],
        secrets_at: None,
        secrets_file: None,
        first_lines: Vec::new(),
        cores: Vec::new(),
        memory_bytes: 1 << 30,
        cgroups: Default::default(),
        cents_per_hour: 495,
        max_spend_cents: None,
        max_seconds: 60,
        stop_grace_seconds: 0,
        started_ms: 0,
        checks: Vec::new(),
        result_path: PathBuf::from("/r"),
        telemetry_path: PathBuf::from("/t"),
        mnt_dir: None,
        volumes: Vec::new(),
        workspace: PathBuf::from("/w"),
        overlay: None,
        init: None,
        node: None,
        tasks: None,
        disk: None,
        python_shim: None,
    };
    let node = parse_node_env("rank=0\nnodes=1\naddrs=127.0.0.1\ncuda=0,1\njob=5\nhost=n1\n");
    let out = node_spec(spec, &node, Path::new("/runs/r_x/nodes/0"));
    assert!(out.started_ms > 0);
    assert!(
        !out.argv.iter().any(|a| a == "/dev/nvidia9"),
        "{:?}",
        out.argv
    );
    assert_eq!(out.argv.iter().filter(|a| *a == "/dev").count(), 1);
    let cuda: Vec<&String> = out
        .env
        .iter()
        .filter(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(cuda, ["0,1"]);
    assert_eq!(out.first_lines[0], "div: Slurm job 5, node 0 of 1 (n1)");
}

#[test]
fn a_slow_controller_is_asked_again_and_a_refusal_is_said_at_once() {
    use super::cluster::patiently;
    let slow = || SlurmError::NoAnswer {
        program: "sinfo".into(),
    };
    let timed_out = || SlurmError::Said {
        program: "sinfo".into(),
        said: "slurm_load_partitions: Socket timed out on send/recv operation".into(),
    };
    let refused = || SlurmError::Said {
        program: "sinfo".into(),
        said: "slurm_load_partitions: Unable to contact slurm controller (connect failure)".into(),
    };
    assert!(slow().is_slow() && timed_out().is_slow() && !refused().is_slow());

    // Slow twice (our deadline, then Slurm's own), then answered: the answer.
    let mut asks = 0;
    let answer = patiently(Duration::from_secs(60), || {
        asks += 1;
        match asks {
            1 => Err(slow()),
            2 => Err(timed_out()),
            _ => Ok(asks),
        }
    });
    assert_eq!(answer.expect("answered on the third ask"), 3);

    // A controller that cannot be reached is not asked again.
    let mut asks = 0;
    let answer: Result<(), _> = patiently(Duration::from_secs(60), || {
        asks += 1;
        Err(refused())
    });
    assert!(matches!(answer, Err(SlurmError::Said { .. })));
    assert_eq!(asks, 1);

    // Patience spent (none here): the slow answer is the error.
    let mut asks = 0;
    let answer: Result<(), _> = patiently(Duration::ZERO, || {
        asks += 1;
        Err(slow())
    });
    assert!(matches!(answer, Err(SlurmError::NoAnswer { .. })));
    assert_eq!(asks, 1);
}
