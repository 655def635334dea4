//! `div stop --json`, and the grace a run sets for being stopped, refused before anything
//! is created.

use div_api::RunStatus;
use div_test_support::mock::mount_run;

use crate::support::{World, run};

#[tokio::test]
async fn stop_prints_json_when_asked() {
    let world = World::new().await;
    mount_run(&world.server, &run(RunStatus::Canceled)).await;
    let done = world.div(&["stop", "run-k4t9", "--json"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let v: serde_json::Value = serde_json::from_str(&done.stdout).expect("json");
    assert_eq!(v["status"], "canceled");
}

#[tokio::test]
async fn a_stop_grace_that_is_not_seconds_up_to_600_is_refused_before_anything_is_created() {
    let world = World::new().await;
    for bad in ["ten", "601", "-1", "1.5"] {
        let env = format!("DIVERGENT_STOP_GRACE={bad}");
        let done = world.div(&["run", "--env", &env, "--", "true"]).await;
        assert_eq!(done.code, 200, "{}", done.stderr);
        assert!(
            done.stderr.contains(&format!(
                "DIVERGENT_STOP_GRACE is `{bad}`; it is whole seconds between SIGTERM and SIGKILL when the run is told to stop, 0 to 600 (e.g. --env DIVERGENT_STOP_GRACE=30)"
            )),
            "{}",
            done.stderr
        );
    }
    world.assert_nothing_created().await;
}
