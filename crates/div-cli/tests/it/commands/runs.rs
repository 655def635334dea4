//! `div runs`: newest first through the cursor, filtered, and when there are none.

use div_api::{CheckOutcome, RunStatus};
use div_test_support::mock::json_response;
use insta::assert_snapshot;
use serde_json::json;
use wiremock::Mock;
use wiremock::matchers::{method, path, query_param, query_param_is_missing};

use super::{TORCHRUN, named, no_ages, verdict};
use crate::support::World;

#[tokio::test]
async fn runs_lists_newest_first_paging_through_the_cursor() {
    let world = World::new().await;
    let mut checked = named("run-b", RunStatus::Succeeded);
    checked.checks = vec![
        "metrics.accuracy >= 0.8".into(),
        "metrics.loss < 0.6".into(),
    ];
    checked.verdicts = vec![
        verdict(
            CheckOutcome::Passed,
            "check passed: metrics.accuracy >= 0.8 (found 0.91)",
        ),
        verdict(
            CheckOutcome::Failed,
            "check failed: metrics.loss < 0.6 (found 0.71)",
        ),
    ];
    checked.spent_cents = 105;
    checked.duration_seconds = 760;
    let mut big = named("run-a", RunStatus::Running);
    big.gpus = 8;
    big.cores = 8;
    big.memory_gib = 64;
    big.entrypoint = TORCHRUN.into();
    Mock::given(method("GET"))
        .and(path("/v1/runs"))
        .and(query_param_is_missing("cursor"))
        .respond_with(json_response(
            200,
            &json!({"runs": [checked, big], "next_cursor": "c2"}),
        ))
        .mount(&world.server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v1/runs"))
        .and(query_param("cursor", "c2"))
        .respond_with(json_response(
            200,
            &json!({"runs": [named("run-z", RunStatus::Queued)]}),
        ))
        .mount(&world.server)
        .await;
    let done = world.div(&["runs", "--limit", "5"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(no_ages(&done.stdout), @r"
    NAME   STATUS     HARDWARE                    AGE       DURATION  SPEND  CHECKS      COMMAND
    run-b  succeeded  H100 · 1 core · 8 GiB      [AGE]  12m 40s   $1.05  missed 1/2  train.py::run
    run-a  running    8× H100 · 8 cores · 64 GiB  [AGE]  0s        $0.00  -           torchrun --nproc-per-node 8 train.py --epochs 30 --lr 0.0003 --batch-size 4096
    run-z  queued     H100 · 1 core · 8 GiB      [AGE]  0s        $0.00  -           train.py::run
    ");
    let queries: Vec<String> = world
        .server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == "/v1/runs")
        .map(|r| r.url.query().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        queries,
        [
            "project=very-cool-classifier&limit=5",
            "project=very-cool-classifier&limit=3&cursor=c2"
        ]
    );

    // With a width (`COLUMNS`, or a terminal's), what was typed is cut to fit, and says so.
    let narrow = world
        .command(&["runs", "--limit", "5"])
        .env("COLUMNS", "100")
        .output()
        .await
        .expect("div runs");
    let stdout = String::from_utf8_lossy(&narrow.stdout);
    assert_eq!(narrow.status.code(), Some(0), "{stdout}");
    assert!(stdout.lines().all(|l| l.chars().count() <= 100), "{stdout}");
    let cut = stdout
        .lines()
        .find(|l| l.starts_with("run-a "))
        .and_then(|l| l.split("  ").last())
        .unwrap_or_default()
        .trim();
    assert!(
        cut.ends_with('…') && TORCHRUN.starts_with(cut.trim_end_matches('…')) && cut.len() > 5,
        "{stdout}"
    );
    assert!(stdout.contains("  train.py::run\n"), "{stdout}");
}

#[tokio::test]
async fn runs_filters_by_status_across_projects_and_stops_at_the_limit() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/runs",
            json_response(
                200,
                &json!({"runs": [named("run-a", RunStatus::Failed)], "next_cursor": "more"}),
            ),
        )
        .await;
    let done = world
        .div(&[
            "runs", "--all", "--status", "failed", "--limit", "1", "--json",
        ])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let runs: serde_json::Value = serde_json::from_str(&done.stdout).expect("json");
    assert_eq!(runs[0]["name"], "run-a");
    let requests = world.server.received_requests().await.unwrap_or_default();
    assert_eq!(requests.len(), 1, "the limit was reached in one page");
    assert_eq!(requests[0].url.query(), Some("status=failed&limit=1"));
}

#[tokio::test]
async fn runs_says_when_there_are_none_and_refuses_a_bad_status() {
    let world = World::new().await;
    world
        .mount("GET", "/v1/runs", json_response(200, &json!({"runs": []})))
        .await;
    let done = world.div(&["runs"]).await;
    assert_eq!((done.code, done.stdout.as_str()), (0, ""));
    assert_snapshot!(done.stderr, @"no runs in project `very-cool-classifier`");

    let bad = world.div(&["runs", "--status", "done"]).await;
    assert_eq!(bad.code, 200);
    assert!(
        bad.stderr
            .contains("unknown status `done`; expected one of queued, running"),
        "{}",
        bad.stderr
    );
    let both = world.div(&["runs", "--all", "--project", "x"]).await;
    assert_eq!(both.code, 200, "{}", both.stderr);
}
