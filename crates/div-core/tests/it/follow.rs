//! `logs` and `stop`: a followed log waits for the run's end; a stop ends a run once.

use std::sync::Arc;

use div_api::{ControlPlane, CreateRun, RunStatus};
use div_core::{LogsOptions, RunError, StopOutcome};
use div_test_support::{ConformanceContext, FakeControlPlane, quick_run};

use crate::Events;

async fn placed(cp: &FakeControlPlane, name: &str) -> String {
    let request: CreateRun = quick_run(&ConformanceContext::default(), Some(name.into()));
    cp.create_run(&format!("key-{name}"), &request)
        .await
        .expect("placed")
        .id
}

#[tokio::test]
async fn a_followed_log_has_every_byte_once_and_ends_with_the_run() {
    let cp = Arc::new(FakeControlPlane::new());
    let id = placed(&cp, "run-a").await;
    cp.append_log(&id, b"one\n").expect("exists");
    let following = {
        let cp = Arc::clone(&cp);
        tokio::spawn(async move {
            let mut events = Events::default();
            let options = LogsOptions {
                run: "run-a".into(),
                follow: true,
                node: None,
            };
            let run = div_core::logs(&*cp, &options, &mut events.sink()).await;
            (run, events)
        })
    };
    cp.append_log(&id, b"two\n").expect("exists");
    cp.finish_run(&id, b"one\ntwo\nthree\n", 3).expect("exists");
    let (run, events) = following.await.expect("no panic");
    let run = run.expect("followed");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.exit_code, Some(3));
    assert_eq!(events.log(), b"one\ntwo\nthree\n");
}

#[tokio::test]
async fn logs_without_follow_say_where_a_running_run_stands() {
    let cp = FakeControlPlane::new();
    let id = placed(&cp, "run-b").await;
    cp.append_log(&id, b"so far\n").expect("exists");
    let mut events = Events::default();
    let options = LogsOptions {
        run: id.clone(),
        follow: false,
        node: None,
    };
    let run = div_core::logs(&cp, &options, &mut events.sink())
        .await
        .expect("read");
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(events.log(), b"so far\n");
}

#[tokio::test]
async fn a_stop_ends_a_run_and_a_second_says_it_had_ended() {
    let cp = FakeControlPlane::new();
    placed(&cp, "run-c").await;
    let StopOutcome::Stopped(run) = div_core::stop(&cp, "run-c").await.expect("stopped") else {
        panic!("stopped now");
    };
    assert_eq!(run.status, RunStatus::Canceled);
    let again = div_core::stop(&cp, "run-c").await.expect("answered");
    assert!(
        matches!(again, StopOutcome::AlreadyEnded(ref r) if r.id == run.id),
        "{again:?}"
    );
    let err = div_core::stop(&cp, "run-zzz")
        .await
        .expect_err("no such run");
    assert!(
        matches!(err, RunError::RunNotFound(ref r) if r == "run-zzz"),
        "{err:?}"
    );
}
