//! `div run`, `div logs` and `div stop` against a wiremock control plane.

use div_api::{CheckOutcome, CheckVerdict, RunStatus};
use insta::assert_snapshot;
use wiremock::Mock;
use wiremock::matchers::{method, path};

use crate::support::{World, run};

/// A refusal: exit 200, the message, and nothing created.
async fn refused(args: &[&str]) -> String {
    let world = World::new().await;
    let done = world.div(args).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert_eq!(done.stdout, "");
    world.assert_nothing_created().await;
    done.stderr
}

#[tokio::test]
async fn a_misspelled_flag_is_refused_with_the_real_one() {
    assert_snapshot!(refused(&["run", "train.py::run", "--max-spent", "5"]).await, @r"
    error: unexpected argument '--max-spent' found

      tip: a similar argument exists: '--max-spend'

    Usage: div run --max-spend <USD> [ENTRYPOINT]... [-- <ARGS>...]

    For more information, try '--help'.
    ");
}

#[tokio::test]
async fn nodes_are_refused_with_the_sentence() {
    assert_snapshot!(refused(&["run", "--nodes", "4", "train.py"]).await, @r"
    error: runs are placed in GPUs, not nodes: `--gpus 32` asks for the same hardware as four nodes of eight
    hint: for 4 nodes of eight, ask for `--gpus 32`
    ");
}

#[tokio::test]
async fn an_unknown_sku_is_refused_with_the_catalogue() {
    assert_snapshot!(refused(&["run", "--gpu=a100", "train.py"]).await, @"error: unknown SKU `a100`; expected one of b300, h200, h100, cpu");
}

#[tokio::test]
async fn memory_is_refused_rather_than_rounded() {
    assert_snapshot!(refused(&["run", "--memory", "512M", "train.py"]).await, @r"
    error: invalid value '512M' for '--memory <GiB>': `512M` is not a whole number of GiB; memory is given in whole GiB, like `64G`, and is not rounded up

    For more information, try '--help'.
    ");
}

#[tokio::test]
async fn other_refusals_reach_nothing() {
    for args in [
        &["run", "--max-spend", "0", "train.py"][..],
        &["run", "--max-spend", "five", "train.py"],
        &["run", "--check", "metrics.accuracy>>0.8", "train.py"],
        &["run", "--env", "NOVALUE", "train.py"],
        &["run", "--gpus", "0", "train.py"],
        &["run", "--cpu", "65", "train.py"],
        &["run", "--memory", "400G", "train.py"],
        &["run", "missing.py::run"],
        &["run", "train.py::not-a-name"],
        &["run", "--project", "My Project", "train.py"],
        &["run", "--telemetry", "nope.toml", "train.py"],
        &["run"],
    ] {
        let stderr = refused(args).await;
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn nothing_to_ship_is_refused() {
    let world = World::new().await;
    std::fs::remove_file(world.project().join("train.py")).expect("rm");
    let done = world.div(&["run", "--", "echo", "hi"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @r"
    error: nothing to ship in `[TMP]/very-cool-classifier`
    hint: run it where the code is, or pass `--no-upload` to run the image as it is
    ");
    world.assert_nothing_created().await;
}

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

/// What a Slurm-backed control plane says of `--gpus 12`.
const NOT_WHOLE_NODES: &str =
    "`--gpus 12`: past 8 GPUs a run takes whole nodes of 8 GPUs; ask for `--gpus 8` or `--gpus 16`";

/// Mount `POST {route}` answering `NOT_WHOLE_NODES` as a refusal.
async fn refusing(world: &World, route: &str) {
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(div_test_support::mock::error_response(
            422,
            "invalid",
            NOT_WHOLE_NODES,
            serde_json::Value::Null,
        ))
        .with_priority(1)
        .mount(&world.server)
        .await;
}

/// A refusal only the control plane can make comes from `POST /v1/runs/validate`, before the
/// code is uploaded or anything made, and prints as the same refusal from `POST /v1/runs`
/// printed after the upload (a control plane without the route).
#[tokio::test]
async fn a_run_the_control_plane_refuses_is_refused_before_anything_is_uploaded() {
    let args = ["run", "--gpu", "h100", "--gpus", "12", "train.py"];
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    refusing(&world, "/v1/runs/validate").await;
    let done = world.div(&args).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert_eq!(done.stdout, "");
    assert_snapshot!(done.stderr, @r"
    error: could not place the run
    caused by: `--gpus 12`: past 8 GPUs a run takes whole nodes of 8 GPUs; ask for `--gpus 8` or `--gpus 16`
    ");
    world.assert_nothing_created().await;
    assert!(
        world
            .requests()
            .await
            .contains(&"POST /v1/runs/validate".to_owned())
    );

    // A control plane without the route refuses the same at `POST /v1/runs`, after the upload.
    let older = World::new().await;
    older
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    refusing(&older, "/v1/runs").await;
    let late = older.div(&args).await;
    assert_eq!(late.code, 200, "{}", late.stderr);
    let at = late.stderr.find("error: ").expect("an error");
    assert_eq!(done.stderr, late.stderr[at..], "printed alike");
    let requests = older.requests().await;
    assert!(
        requests.iter().any(|r| r.ends_with("/trees")),
        "the older control plane got the code first: {requests:?}"
    );
}

/// A control plane that answers `POST /v1/runs/validate` 404 (wiremock's answer to a route
/// it was not given) or 405 has no such question: the run is shipped and placed as before.
#[tokio::test]
async fn a_control_plane_without_validation_places_the_run_as_before() {
    for status in [404, 405] {
        let world = World::new().await;
        world
            .mount_placing(
                &run(RunStatus::Queued),
                &[b"hi\n"],
                &run(RunStatus::Succeeded),
            )
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/runs/validate"))
            .respond_with(wiremock::ResponseTemplate::new(status))
            .with_priority(1)
            .mount(&world.server)
            .await;
        let done = world.div(&["run", "train.py"]).await;
        assert_eq!(done.code, 0, "{status}: {}", done.stderr);
        assert_eq!(done.stdout, "hi\n");
        let requests = world.requests().await;
        let at = |route: &str| requests.iter().position(|r| r == route);
        assert!(
            at("POST /v1/runs/validate") < at("POST /v1/runs") && at("POST /v1/runs").is_some(),
            "{status}: {requests:?}"
        );
    }
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
async fn the_request_carries_every_flag() {
    let world = World::new().await;
    // A layout, as `div run` now reads it before anything is created.
    std::fs::write(
        world.project().join("telemetry.toml"),
        "[[chart]]\nseries = [\"loss\"]\n",
    )
    .expect("write");
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let done = world
        .div(&[
            "run",
            "-d",
            "--gpu",
            "h200",
            "--gpus",
            "2",
            "--cpu",
            "8",
            "--memory",
            "64G",
            "--max-spend",
            "$5",
            "--name",
            "mine",
            "--image",
            "python:3.12",
            "--env",
            "A=1",
            "--env",
            "B=x=y",
            "--check",
            "metrics.accuracy>=0.8",
            "--volume",
            "codevol",
            "--project",
            "proj",
            "train.py::run",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let mut body = world.placed_body().await;
    body["code"]["path"] = "code/[ID]".into();
    assert_snapshot!(serde_json::to_string_pretty(&body).expect("json"), @r#"
    {
      "project": "proj",
      "name": "mine",
      "entrypoint": "train.py::run",
      "command": "python -u -c 'from train import run; run()'",
      "sku": "h200",
      "gpus": 2,
      "cpu": 8,
      "memory_gib": 64,
      "max_spend_cents": 500,
      "image": "python:3.12",
      "env": [
        {
          "key": "A",
          "value": "1"
        },
        {
          "key": "B",
          "value": "x=y"
        }
      ],
      "checks": [
        "metrics.accuracy >= 0.8"
      ],
      "code": {
        "volume": "codevol",
        "path": "code/[ID]"
      },
      "telemetry_layout": "[[chart]]\nseries = [\"loss\"]\n"
    }
    "#);
}

#[tokio::test]
async fn a_volume_the_command_names_is_made_before_the_run() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let done = world
        .div(&[
            "run",
            "-d",
            "--no-upload",
            "--",
            "mkdir -p /mnt/mask-models/base && python download.py",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @r"
    new volume mask-models, for the /mnt/mask-models the command names
    run-k4t9  H100  $4.95/h  no ceiling
    ");
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.contains("/blobs/")),
        "--no-upload ships nothing: {requests:?}"
    );
    let bodies = world.server.received_requests().await.unwrap_or_default();
    let made = bodies
        .iter()
        .position(|r| {
            r.url.path() == "/v1/volumes"
                && String::from_utf8_lossy(&r.body).contains("mask-models")
        })
        .expect("the volume was made");
    let placed = bodies
        .iter()
        .position(|r| r.method.as_str() == "POST" && r.url.path() == "/v1/runs")
        .expect("placed");
    assert!(made < placed, "the volume is made before the run is placed");
}

#[tokio::test]
async fn dry_run_checks_everything_and_places_nothing() {
    let world = World::new().await;
    let done = world
        .div(&[
            "run",
            "--dry-run",
            "--cpu",
            "8",
            "--memory",
            "64G",
            "train.py",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let mut lines: Vec<String> = done.stdout.lines().map(String::from).collect();
    lines[3] = lines[3]
        .split("/code/")
        .next()
        .unwrap_or_default()
        .to_string();
    assert_snapshot!(lines.join("\n"), @r"
    project    very-cool-classifier
    entrypoint train.py
    command    python -u train.py
    ships      1 file, 27 B → very-cool-classifier-code
    largest files
            27 B  train.py
    header     <name>  H100 · 8 cores · 64 GiB  $7.82/h  no ceiling
    at most    $187.68 (24 hours with no ceiling)
    nothing was placed (--dry-run)
    ");
    world.assert_nothing_created().await;
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
async fn logs_prints_the_log_and_the_last_line() {
    let world = World::new().await;
    let mut ended = run(RunStatus::Canceled);
    ended.duration_seconds = 240;
    ended.spent_cents = 33;
    div_test_support::mock::mount_run(&world.server, &ended).await;
    div_test_support::mock::mount_log(
        &world.server,
        &ended.id,
        div_test_support::mock::log_body(&[b"a\n", b"b\n"], &ended),
    )
    .await;
    let done = world.div(&["logs", "run-k4t9"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(done.stdout, "a\nb\n");
    assert_eq!(
        done.stderr,
        "run-k4t9 was canceled after 4m 0s, $0.33 spent\n"
    );
}

#[tokio::test]
async fn stopping_an_ended_run_says_so() {
    let world = World::new().await;
    let mut ended = run(RunStatus::Succeeded);
    ended.duration_seconds = 760;
    ended.spent_cents = 105;
    div_test_support::mock::mount_run(&world.server, &ended).await;
    let done = world.div(&["stop", "run-k4t9"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @r"
    run-k4t9 had already ended
    run-k4t9 finished in 12m 40s and spent $1.05
    ");
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.ends_with("/stop")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn an_unknown_run_is_refused() {
    let world = World::new().await;
    let done = world.div(&["logs", "run-nope"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @r"
    error: there is no run `run-nope`
    hint: `div runs` lists them
    ");
}

#[tokio::test]
async fn an_unreachable_control_plane_has_its_own_code() {
    let world = World::new().await;
    let mut c = world.command(&["run", "train.py"]);
    c.env("DIVERGENT_API_URL", "http://127.0.0.1:9")
        .env("DIVERGENT_API_TIMEOUT", "1");
    let out = c.output().await.expect("runs");
    assert_eq!(out.status.code(), Some(201));
}

#[tokio::test]
async fn a_real_sku_this_control_plane_lacks_is_refused_with_what_it_has() {
    // The local control plane offers only the GPUs its machine has: `h100` is a real SKU, but
    // not one it can place, and the hint says what would work.
    let world = crate::support::World::new().await;
    world.server.reset().await;
    let mut only_cpu = crate::support::catalogue();
    only_cpu.skus.retain(|s| s.name == "cpu");
    div_test_support::mock::mount_catalogue(&world.server, &only_cpu).await;
    let done = world.div(&["run", "--gpu", "h100", "train.py"]).await;
    assert_eq!(done.code, 200, "{}", done.stderr);
    assert_eq!(done.stdout, "");
    world.assert_nothing_created().await;
    assert_snapshot!(done.stderr, @r"
    error: this control plane has no `h100`; it accepts cpu
    hint: the local control plane offers the GPUs this machine has; run on its cores with `--gpu cpu`, or declare emulated GPUs to try things out with `DIVERGENT_EMULATE_GPUS=h100:8` (`div server --help`)
    ");
}

#[tokio::test]
async fn a_negative_ceiling_is_refused_by_what_it_is() {
    assert_snapshot!(refused(&["run", "--max-spend", "-3", "train.py"]).await, @r"
    error: invalid value '-3' for '--max-spend <USD>': `-3` is negative; write a positive amount like `5.00`

    For more information, try '--help'.
    ");
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
async fn defaults_reach_the_request_and_telemetry_names_another_layout() {
    let world = World::new().await;
    std::fs::write(world.project().join("telemetry.toml"), "[shipped]\n").expect("write");
    std::fs::write(
        world.project().join("charts.toml"),
        "[[chart]]\nseries = [\"named\"]\n",
    )
    .expect("write");
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let done = world
        .div(&["run", "--detach", "--telemetry", "charts.toml", "train.py"])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let mut body = world.placed_body().await;
    body["code"]["path"] = "code/[ID]".into();
    assert_snapshot!(serde_json::to_string_pretty(&body).expect("json"), @r#"
    {
      "project": "very-cool-classifier",
      "entrypoint": "train.py",
      "command": "python -u train.py",
      "sku": "h100",
      "gpus": 1,
      "env": [],
      "checks": [],
      "code": {
        "volume": "very-cool-classifier-code",
        "path": "code/[ID]"
      },
      "telemetry_layout": "[[chart]]\nseries = [\"named\"]\n"
    }
    "#);
}

#[tokio::test]
async fn a_typed_default_image_is_sent_and_pulled_like_any_other() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let image = "pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime";
    let done = world
        .div(&["run", "--detach", "--image", image, "train.py"])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    // Typed, it is named in the request (the control plane never stands in for a named
    // image), and the pull is asked for before the run is placed.
    assert_eq!(world.placed_body().await["image"], image);
    let requests = world.requests().await;
    let pull = requests.iter().position(|r| r.ends_with("/v1/images/pull"));
    let place = requests.iter().position(|r| r.ends_with("/v1/runs"));
    assert!(
        matches!((pull, place), (Some(p), Some(c)) if p < c),
        "{requests:?}"
    );

    // Not typed: no image is sent and nothing is pulled; the control plane's default applies.
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    let done = world.div(&["run", "--detach", "train.py"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let body = world.placed_body().await;
    assert!(body.get("image").is_none(), "{body}");
    let requests = world.requests().await;
    assert!(
        requests.iter().any(|r| r.ends_with("/v1/runs"))
            && !requests.iter().any(|r| r.ends_with("/v1/images/pull")),
        "{requests:?}"
    );
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
