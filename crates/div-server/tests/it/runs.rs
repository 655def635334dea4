//! Runs end to end: placed through the API, run by a supervisor, followed to their end.

use serde_json::json;

use crate::harness::Server;

#[tokio::test(flavor = "multi_thread")]
async fn a_run_runs_and_passes_its_checks() {
    let server = Server::start().await;
    let command = r#"echo hello from $DIVERGENT_RUN_NAME; python -c 'import json,os; json.dump({"metrics": {"accuracy": 0.91, "loss": 0.71}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))'; printf '{"step": 1, "loss": 0.5}\nnot json\n' > $DIVERGENT_TELEMETRY_PATH"#;
    let (status, run) = server
        .create_run(
            command,
            json!({"checks": ["metrics.accuracy>=0.8", "metrics.loss<0.6"]}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "queued");
    let name = run["name"].as_str().expect("a name");
    assert!(name.starts_with("run-") && name.len() == 8, "{name}");
    let id = run["id"].as_str().expect("an id");
    let ended = server.wait_end(id).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    assert_eq!(ended["exit_code"], 0);
    let log = server.log_text(id).await;
    assert!(log.contains(&format!("hello from {name}\n")), "{log}");
    assert!(
        log.contains("check passed: metrics.accuracy >= 0.8 (found 0.91)\n"),
        "{log}"
    );
    assert!(
        log.contains("check failed: metrics.loss < 0.6 (found 0.71)\n"),
        "{log}"
    );
    let (_, result) = server
        .request("GET", &format!("/v1/runs/{id}/result"), None)
        .await;
    assert_eq!(result["result"]["metrics"]["accuracy"], 0.91, "{result}");
    assert_eq!(result["verdicts"].as_array().map(Vec::len), Some(2));
    let (_, telemetry) = server
        .request("GET", &format!("/v1/runs/{id}/telemetry"), None)
        .await;
    assert_eq!(
        telemetry["points"],
        json!([{"line": 1, "point": {"step": 1, "loss": 0.5}}]),
        "{telemetry}"
    );
    assert_eq!(telemetry["bad_lines"][0]["line"], 2, "{telemetry}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_code_passes_through() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run("echo about to fail; exit 3", json!({}))
        .await;
    let ended = server.wait_end(run["id"].as_str().expect("an id")).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 3);
    assert_eq!(ended["reason"], "about to fail");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_outlives_a_killed_server_and_is_followed_to_its_end() {
    let server = Server::start().await;
    let (_, run) = server
        .create_run(
            "echo first; while [ ! -f /tmp/go ]; do sleep 0.05; done; echo second; exit 4",
            json!({}),
        )
        .await;
    let id = run["id"].as_str().expect("an id").to_owned();
    server.wait_log(&id, "first\n").await;
    let (home, dir) = server.kill().await;
    // While no server runs, the run goes on and ends.
    let run_tmp = home.join("runs").join(&id).join("tmp");
    std::fs::write(run_tmp.join("go"), b"").expect("the run's /tmp is writable");
    let end = home.join("runs").join(&id).join("end.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !end.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor never ended the run"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let server = Server::at(crate::harness::options(
        &home,
        Some("h100:2"),
        div_server::SandboxMode::Auto,
    ))
    .await;
    let ended = server.wait_end(&id).await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["exit_code"], 4);
    assert_eq!(server.log_text(&id).await, "first\nsecond\n");
    drop(server);
    drop(dir);
}
