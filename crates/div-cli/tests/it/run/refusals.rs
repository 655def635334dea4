//! What `div run` refuses before anything is created or uploaded, and says why; the control
//! plane's own refusal asked first; `--dry-run`.

use div_api::RunStatus;
use insta::assert_snapshot;
use wiremock::Mock;
use wiremock::matchers::{method, path};

use super::{refused, refusing};
use crate::support::{World, run};

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
