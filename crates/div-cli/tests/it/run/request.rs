//! What the request that places the run carries: every flag, the defaults, a typed default
//! image, a volume the command names made first.

use div_api::RunStatus;
use insta::assert_snapshot;

use crate::support::{World, run};

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
