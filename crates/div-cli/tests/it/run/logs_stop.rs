//! `div logs` and `div stop`.

use div_api::RunStatus;
use insta::assert_snapshot;

use crate::support::{World, run};

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
