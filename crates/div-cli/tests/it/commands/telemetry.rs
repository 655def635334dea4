//! `div telemetry`: points as JSON, and plotted.

use div_api::RunStatus;
use div_test_support::mock::{json_response, mount_run};
use serde_json::json;

use crate::support::{World, run};

#[tokio::test]
async fn telemetry_prints_points_as_json_and_plots_them() {
    let world = World::new().await;
    let mut r = run(RunStatus::Succeeded);
    r.telemetry_layout = Some("[[chart]]\ntitle = \"loss\"\nseries = [\"loss\"]\n".into());
    mount_run(&world.server, &r).await;
    world
        .mount(
            "GET",
            "/v1/runs/r_run-k4t9/telemetry",
            json_response(
                200,
                &json!({"run": "run-k4t9", "points": [
                    {"line": 1, "point": {"step": 0, "loss": 2.0}},
                    {"line": 2, "point": {"step": 1, "loss": 1.0}}
                ]}),
            ),
        )
        .await;
    let json = world.div(&["telemetry", "run-k4t9", "--json"]).await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    assert_eq!(
        json.stdout,
        "{\"step\":0,\"loss\":2.0}\n{\"step\":1,\"loss\":1.0}\n"
    );
    let plot = world.div(&["telemetry", "run-k4t9"]).await;
    assert_eq!(plot.code, 0, "{}", plot.stderr);
    assert!(
        plot.stdout.starts_with("loss (over step)\n2 ┤"),
        "{}",
        plot.stdout
    );
    assert!(
        plot.stdout
            .contains("  loss: 2 points, last 1, min 1, max 2\n"),
        "{}",
        plot.stdout
    );

    std::fs::write(world.project().join("bad.toml"), "[[chart]]\ntitle = 3\n").expect("write");
    let bad = world
        .div(&["telemetry", "run-k4t9", "--telemetry", "bad.toml"])
        .await;
    assert_eq!(bad.code, 200);
    assert!(
        bad.stderr
            .starts_with("error: the telemetry layout is not valid: "),
        "{}",
        bad.stderr
    );
}
