//! Graceful stops: a run told to stop (by `stop`, near its ceiling, near its time limit) gets
//! SIGTERM, then its grace to checkpoint and write its result, then SIGKILL; its checks are
//! judged on what it wrote.

use serde_json::{Value, json};

use crate::harness::Server;

/// A run that writes its result and exits when it gets SIGTERM, and otherwise never ends.
const TRAPS_TERM: &str = "trap 'echo \"{\\\"epoch\\\": 18}\" > \"$DIVERGENT_RESULT_PATH\"; echo saved; exit 0' TERM; echo started; while :; do sleep 0.05; done";

fn env(grace: &str) -> Value {
    json!([{"key": "DIVERGENT_STOP_GRACE", "value": grace}])
}

fn assert_judged_on_the_result(ended: &Value, log: &str) {
    assert_eq!(
        ended["verdicts"][0]["line"], "check passed: epoch >= 18 (found 18)",
        "{ended}"
    );
    assert!(log.contains("\nsaved\n"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_run_gets_sigterm_writes_its_result_and_is_judged_on_it() {
    let server = Server::start().await;
    let (status, run) = server
        .create_run(TRAPS_TERM, json!({"checks": ["epoch>=18"]}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    server.wait_log(id, "started\n").await;
    let (status, stopped) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "canceled", "{ended}");
    let log = server.log_text(id).await;
    assert!(
        log.contains("started\ndiv: it was asked to stop: SIGTERM sent to the run; SIGKILL in 10 s if it has not exited\n"),
        "{log}"
    );
    assert_judged_on_the_result(&ended, &log);
    let (_, result) = server
        .request("GET", &format!("/v1/runs/{id}/result"), None)
        .await;
    assert_eq!(result["result"]["epoch"], 18, "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn near_its_ceiling_a_run_gets_sigterm_while_the_money_left_buys_its_grace() {
    let server = Server::start().await;
    // 1 cent at $4.95/h is reached in the 8th second; a 2 s grace: SIGTERM at 6 s.
    let (status, run) = server
        .create_run(
            TRAPS_TERM,
            json!({"sku": "h100", "max_spend_cents": 1, "checks": ["epoch>=18"], "env": env("2")}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "hit_ceiling", "{ended}");
    assert!(
        ended["spent_cents"].as_i64().expect("spent") <= 1,
        "{ended}"
    );
    let seconds = ended["duration_seconds"].as_u64().expect("a duration");
    assert!((6..8).contains(&seconds), "{ended}");
    let log = server.log_text(id).await;
    assert!(
        log.contains("started\ndiv: its $0.01 ceiling is 2 s away: SIGTERM sent to the run; SIGKILL in 2 s if it has not exited\n"),
        "{log}"
    );
    assert_judged_on_the_result(&ended, &log);
}

#[tokio::test(flavor = "multi_thread")]
async fn near_its_time_limit_a_run_gets_sigterm_and_its_grace() {
    let server = Server::start().await;
    // This machine gives runs 3 s, and a grace of 1 s: SIGTERM at 2 s.
    std::fs::write(
        server.home.join("settings.json"),
        r#"{"max_run_seconds": 3, "stop_grace_seconds": 1}"#,
    )
    .expect("settings");
    let (status, run) = server
        .create_run(TRAPS_TERM, json!({"checks": ["epoch>=18"]}))
        .await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(
        ended["reason"], "reached this machine's time limit of 3 s (max_run_seconds)",
        "{ended}"
    );
    let log = server.log_text(id).await;
    assert!(
        log.contains("started\ndiv: its time limit of 3 s (max_run_seconds) is 1 s away: SIGTERM sent to the run; SIGKILL in 1 s if it has not exited\n"),
        "{log}"
    );
    assert_judged_on_the_result(&ended, &log);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ignores_sigterm_is_killed_when_its_grace_is_over() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "trap '' TERM; echo started; sleep 1000",
            json!({"env": env("1")}),
        )
        .await;
    let id = run["id"].as_str().expect("an id");
    server.wait_log(id, "started\n").await;
    let (status, stopped) = server
        .request("POST", &format!("/v1/runs/{id}/stop"), None)
        .await;
    assert_eq!(status, 200, "{stopped}");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "canceled", "{ended}");
    let log = server.log_text(id).await;
    assert!(
        log.ends_with("SIGKILL in 1 s if it has not exited\n"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grace_that_is_not_whole_seconds_up_to_600_is_refused_before_the_run_exists() {
    let server = Server::start().await;
    for bad in ["ten", "-1", "601", "1.5", "+3", ""] {
        let (status, body) = server.create_run("true", json!({"env": env(bad)})).await;
        assert_eq!(status, 422, "{bad:?}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("DIVERGENT_STOP_GRACE")
                && message.contains("0 to 600 (e.g. --env DIVERGENT_STOP_GRACE=30)"),
            "{message}"
        );
    }
    let (_, runs) = server.request("GET", "/v1/runs", None).await;
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");
    let (status, run) = server.create_run("true", json!({"env": env("0")})).await;
    assert_eq!(status, 201, "{run}");
}
