//! What `div run` prints, in order, and exits with: attached, `--json`, `--detach`, a
//! Ctrl-C, outside a repository.

use div_api::{CheckOutcome, CheckVerdict, RunStatus};
use insta::assert_snapshot;

use crate::support::{World, run};

#[tokio::test]
async fn an_attached_run_prints_shipping_header_log_and_last_line() {
    let world = World::new().await;
    let mut ended = run(RunStatus::Succeeded);
    ended.duration_seconds = 760;
    ended.spent_cents = 105;
    world
        .mount_placing(
            &run(RunStatus::Queued),
            &[b"epoch 1\n", b"epoch 2\n"],
            &ended,
        )
        .await;
    let done = world
        .div(&[
            "run",
            "--gpu",
            "h100",
            "train.py::run",
            "--max-spend",
            "5.00",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.stdout, "epoch 1\nepoch 2\n");
    let stderr = done.stderr.replace(char::is_numeric, "#");
    // The project is in no git repository: said first, with the count.
    assert!(
        stderr.starts_with(
            "not a git repository: shipping every file but the skip list (# file)\n# file, ## B → very-cool-classifier-code/code/"
        ),
        "{stderr}"
    );
    let lines: Vec<&str> = done.stderr.lines().skip(2).collect();
    assert_eq!(
        lines,
        [
            "run-k4t9  H100  $4.95/h  $5.00 buys 1h 0m",
            "run-k4t9 finished in 12m 40s and spent $1.05"
        ]
    );
    let requests = world.requests().await;
    let create = requests
        .iter()
        .position(|r| r == "POST /v1/runs")
        .expect("placed");
    let commit = requests
        .iter()
        .position(|r| r.ends_with("/trees"))
        .expect("committed");
    assert!(
        commit < create,
        "the code is shipped before the run is placed: {requests:?}"
    );
}

#[tokio::test]
async fn every_status_has_its_last_line_and_exit_code() {
    let verdict = |outcome| CheckVerdict {
        check: "metrics.accuracy >= 0.8".into(),
        outcome,
        found: None,
        line: String::new(),
        extra: Default::default(),
    };
    let cases = [
        (
            RunStatus::Succeeded,
            Some(0),
            None,
            760,
            105,
            0,
            "run-k4t9 finished in 12m 40s and spent $1.05 · missed 1 of 2 checks",
        ),
        (
            RunStatus::HitCeiling,
            None,
            None,
            3636,
            500,
            205,
            "run-k4t9 hit its $5.00 ceiling after 1h 0m",
        ),
        (
            RunStatus::StoppedByOrg,
            None,
            Some("org usage limit of $500.00 reached"),
            720,
            310,
            207,
            "run-k4t9 was stopped by the org after 12m 0s: org usage limit of $500.00 reached — $3.10 spent",
        ),
        (
            RunStatus::Failed,
            Some(1),
            Some("ValueError: bad"),
            192,
            27,
            1,
            "run-k4t9 failed after 3m 12s (exit 1): ValueError: bad — $0.27 spent",
        ),
        (
            RunStatus::Failed,
            Some(3),
            Some("boom"),
            192,
            27,
            3,
            "run-k4t9 failed after 3m 12s (exit 3): boom — $0.27 spent",
        ),
        (
            RunStatus::Canceled,
            None,
            None,
            240,
            33,
            206,
            "run-k4t9 was canceled after 4m 0s, $0.33 spent",
        ),
    ];
    for (status, exit, reason, seconds, spent, code, line) in cases {
        let world = World::new().await;
        let mut ended = run(status);
        ended.exit_code = exit;
        ended.reason = reason.map(String::from);
        ended.duration_seconds = seconds;
        ended.spent_cents = spent;
        if status == RunStatus::HitCeiling {
            ended.max_spend_cents = Some(500);
        }
        if status == RunStatus::Succeeded {
            ended.checks = vec!["a".into(), "b".into()];
            ended.verdicts = vec![verdict(CheckOutcome::Passed), verdict(CheckOutcome::Failed)];
        }
        world
            .mount_placing(&run(RunStatus::Queued), &[b"x\n"], &ended)
            .await;
        let done = world.div(&["run", "train.py::run"]).await;
        assert_eq!(done.code, code, "{status}: {}", done.stderr);
        assert_eq!(done.stderr.lines().last(), Some(line), "{status}");
    }
}

#[tokio::test]
async fn json_prints_the_run_as_it_ended_with_unknown_fields() {
    let world = World::new().await;
    let mut ended = run(RunStatus::Succeeded);
    ended
        .extra
        .insert("gpu_hours".into(), serde_json::json!(0.2));
    world
        .mount_placing(&run(RunStatus::Queued), &[b"log line\n"], &ended)
        .await;
    let done = world.div(&["run", "--json", "train.py"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let printed: serde_json::Value =
        serde_json::from_str(&done.stdout).expect("stdout is exactly the JSON");
    assert_eq!(printed["gpu_hours"], serde_json::json!(0.2));
    assert_eq!(printed["status"], "succeeded");
    assert!(
        done.stderr.contains("log line\n"),
        "the log goes to stderr with --json"
    );
}

#[tokio::test]
async fn detach_prints_the_name_once_placed() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let done = world
        .div(&[
            "run",
            "-d",
            "--",
            "torchrun",
            "--nproc-per-node",
            "8",
            "train.py",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.stdout, "run-k4t9\n");
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.ends_with("/log")),
        "{requests:?}"
    );
    let body = world.placed_body().await;
    assert_eq!(body["command"], "torchrun --nproc-per-node 8 train.py");
}

#[tokio::test]
async fn ctrl_c_detaches_and_says_how_to_follow_and_stop() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // A log that never ends: beats only.
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/v1/runs/r_run-k4t9/log"))
        .respond_with(
            wiremock::ResponseTemplate::new(200)
                .set_body_raw(b"beat\n".to_vec(), div_api::logframe::MEDIA_TYPE)
                .set_delay(std::time::Duration::from_secs(2)),
        )
        .with_priority(1)
        .mount(&world.server)
        .await;
    let mut child = world
        .command(&["run", "train.py"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let mut stderr = BufReader::new(child.stderr.take().expect("piped")).lines();
    let mut seen = Vec::new();
    while let Some(line) = stderr.next_line().await.expect("reads") {
        let header = line.starts_with("run-k4t9  ");
        seen.push(line);
        if header {
            break;
        }
    }
    let pid = child.id().expect("running") as i32;
    let pid = rustix::process::Pid::from_raw(pid).expect("a positive pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT sent");
    while let Some(line) = stderr.next_line().await.expect("reads") {
        seen.push(line);
    }
    let status = child.wait().await.expect("exits");
    assert_eq!(status.code(), Some(208));
    // Outside a repository, said first; then the shipping line.
    assert_eq!(
        seen[0],
        "not a git repository: shipping every file but the skip list (1 file)"
    );
    assert_snapshot!(seen[2..].join("\n"), @r"
    run-k4t9  H100  $4.95/h  no ceiling
    detached from run-k4t9; it goes on
      follow it again: div logs run-k4t9 --follow
      stop it:         div stop run-k4t9
    ");
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.ends_with("/stop")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn the_output_comes_in_order_shipping_header_log_last_line() {
    // stdout and stderr into one pipe, as a terminal shows them.
    let world = World::new().await;
    let mut ended = run(RunStatus::Succeeded);
    ended.duration_seconds = 760;
    ended.spent_cents = 105;
    world
        .mount_placing(
            &run(RunStatus::Queued),
            &[
                b"epoch 1\n",
                b"check passed: metrics.accuracy >= 0.8 (found 0.91)\n",
            ],
            &ended,
        )
        .await;
    let mut c = world.command(&[]);
    c.env("DIV", crate::support::DIV);
    let script =
        "exec \"$DIV\" run --max-spend 5 -- 'mkdir -p /mnt/mask-models && python train.py' 2>&1";
    let out = tokio::process::Command::new("sh")
        .args(["-c", script])
        .envs(c.as_std().get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env_remove("DIVERGENT_PROJECT")
        .current_dir(world.project())
        .output()
        .await
        .expect("sh runs div");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let text = text
        .split_once("/code/")
        .map(|(a, b)| format!("{a}/code/[ID]{}", &b[8..]))
        .unwrap_or_default();
    assert_snapshot!(text, @r"
    not a git repository: shipping every file but the skip list (1 file)
    1 file, 27 B → very-cool-classifier-code/code/[ID]
    new volume mask-models, for the /mnt/mask-models the command names
    run-k4t9  H100  $4.95/h  $5.00 buys 1h 0m
    epoch 1
    check passed: metrics.accuracy >= 0.8 (found 0.91)
    run-k4t9 finished in 12m 40s and spent $1.05
    ");
}

#[tokio::test]
async fn detach_with_json_prints_the_run_as_placed_with_unknown_fields() {
    let world = World::new().await;
    let mut placed = run(RunStatus::Queued);
    placed
        .extra
        .insert("queue_position".into(), serde_json::json!(3));
    world
        .mount_placing(&placed, &[], &run(RunStatus::Succeeded))
        .await;
    let done = world.div(&["run", "-d", "--json", "train.py"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let printed: serde_json::Value =
        serde_json::from_str(&done.stdout).expect("stdout is exactly the JSON");
    assert_eq!(printed["status"], "queued");
    assert_eq!(printed["queue_position"], 3);
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.ends_with("/log")),
        "it returns once placed: {requests:?}"
    );
}

/// Outside a git repository `div run` says so, with the count, before the shipping line; a
/// shipment of 100 MB or more gets a warning whose hint fits where it is: `git init` and a
/// `.gitignore` outside a repository (where no `.gitignore` is read), a `.gitignore` inside.
#[tokio::test]
async fn outside_a_repository_div_says_so_and_the_large_shipment_hint_fits() {
    let world = World::new().await;
    std::fs::create_dir_all(world.project().join("data")).expect("mkdir");
    // Sparse: 150 MB to hash, nothing on disk.
    let shard = std::fs::File::create(world.project().join("data/shard.bin")).expect("create");
    shard.set_len(150_000_000).expect("set_len");

    let outside = world.div(&["run", "--dry-run", "train.py"]).await;
    assert_eq!(outside.code, 0, "{}", outside.stderr);
    let lines: Vec<&str> = outside.stderr.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("not a git repository: shipping every file but the skip list (2 files)"),
        "{}",
        outside.stderr
    );
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with("2 files, 150.0 MB → ")),
        "{}",
        outside.stderr
    );
    assert!(
        outside
            .stderr
            .contains("warning: this ships 150.0 MB, 150.0 MB of it in `data/`\n"),
        "{}",
        outside.stderr
    );
    assert!(
        outside.stderr.contains(
            "hint: `git init` and a `.gitignore` that names `data/` leave it out, or send it once with `div storage put` and read it from `/mnt/<volume>`\n"
        ),
        "{}",
        outside.stderr
    );

    // The same folder as a repository: nothing said about git, and the hint names a
    // `.gitignore` of its own.
    let init = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(world.project())
        .status()
        .expect("git runs");
    assert!(init.success());
    let inside = world.div(&["run", "--dry-run", "train.py"]).await;
    assert_eq!(inside.code, 0, "{}", inside.stderr);
    assert!(
        !inside.stderr.contains("not a git repository"),
        "{}",
        inside.stderr
    );
    assert!(
        inside.stderr.starts_with("2 files, 150.0 MB → "),
        "{}",
        inside.stderr
    );
    assert!(
        inside.stderr.contains(
            "hint: name `data/` in `.gitignore` to leave it out, or send it once with `div storage put` and read it from `/mnt/<volume>`\n"
        ),
        "{}",
        inside.stderr
    );
}
