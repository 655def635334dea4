//! `div result`: the object and each verdict, the exit code of a missed check; and a check
//! the shell cut (`>` made a file), refused for `div run` and `div result` alike.

use div_api::CheckOutcome;
use div_test_support::mock::error_response;
use insta::assert_snapshot;
use serde_json::json;

use super::{mount_result, verdict};
use crate::support::World;

#[tokio::test]
async fn result_prints_the_object_and_each_verdict() {
    let world = World::new().await;
    mount_result(
        &world,
        json!({"run": "run-k4t9", "result": {"metrics": {"accuracy": 0.91}},
               "verdicts": [verdict(CheckOutcome::Passed, "check passed: metrics.accuracy >= 0.8 (found 0.91)")]}),
    )
    .await;
    let done = world.div(&["result", "run-k4t9"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stdout, @r#"
    {
      "metrics": {
        "accuracy": 0.91
      }
    }
    check passed: metrics.accuracy >= 0.8 (found 0.91)
    "#);

    let again = world
        .div(&[
            "result",
            "run-k4t9",
            "--check",
            "metrics.accuracy>0.95",
            "--check",
            "metrics.f1>0.5",
        ])
        .await;
    assert_eq!(
        again.code, 210,
        "a check given here missed: {}",
        again.stderr
    );
    assert!(
        again.stdout.ends_with(
            "check failed: metrics.accuracy > 0.95 (found 0.91) · judged here\n\
         check unknown: metrics.f1 > 0.5 (the result has no metrics.f1) · judged here\n"
        ),
        "{}",
        again.stdout
    );

    let json = world
        .div(&[
            "result",
            "run-k4t9",
            "--check",
            "metrics.accuracy>=0.9",
            "--json",
        ])
        .await;
    assert_eq!(json.code, 0, "{}", json.stderr);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(v["judged"][0]["outcome"], "passed");
    assert_eq!(v["verdicts"][0]["outcome"], "passed");
}

#[tokio::test]
async fn result_exits_210_when_the_runs_own_check_missed_and_says_when_there_is_none() {
    let world = World::new().await;
    mount_result(
        &world,
        json!({"run": "run-k4t9", "problem": "the run wrote no result",
               "verdicts": [verdict(CheckOutcome::Unknown, "check unknown: metrics.accuracy >= 0.8 (the result has no metrics.accuracy)")]}),
    )
    .await;
    let done = world.div(&["result", "run-k4t9"]).await;
    assert_eq!(done.code, 210);
    assert_snapshot!(done.stderr, @"run-k4t9 has no result: the run wrote no result");
    assert_eq!(
        done.stdout,
        "check unknown: metrics.accuracy >= 0.8 (the result has no metrics.accuracy)\n"
    );
}

#[tokio::test]
async fn result_of_an_unknown_run_is_refused_and_a_bad_check_reaches_nothing() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/runs/run-nope",
            error_response(404, "not_found", "no run", json!(null)),
        )
        .await;
    let done = world.div(&["result", "run-nope"]).await;
    assert_eq!(done.code, 200);
    assert_snapshot!(done.stderr, @r"
    error: there is no run `run-nope`
    hint: `div runs` lists them
    ");
    let world = World::new().await;
    let bad = world
        .div(&["result", "run-k4t9", "--check", "metrics.accuracy>>1"])
        .await;
    assert_eq!(bad.code, 200);
    assert!(world.requests().await.is_empty());
}

/// `--check metrics.accuracy>0.9` typed unquoted, as a shell runs it: the shell makes a file
/// `0.9` and sends div's output into it, and div sees `--check metrics.accuracy`. The refusal
/// says so, names the file, and gives the check quoted; nothing reaches the control plane.
#[tokio::test]
async fn an_unquoted_check_is_refused_naming_the_file_the_shell_made() {
    let world = World::new().await;
    for (typed, file, op) in [
        ("metrics.accuracy>0.9", "0.9", ">"),
        ("metrics.accuracy>=0.8", "=0.8", ">"),
    ] {
        for (command, rest) in [("run --gpu cpu", " -- true"), ("result run-k4t9", "")] {
            let line = format!("exec \"$DIV\" {command} --check {typed}{rest}");
            // div's own environment for the test, with a shell in front of it.
            let div = world.command(&[]);
            let div = div.as_std();
            let mut sh = tokio::process::Command::new("sh");
            sh.args(["-c", &line])
                .current_dir(world.project())
                .env_clear()
                .env("DIV", div.get_program());
            for (key, value) in div.get_envs() {
                if let Some(value) = value {
                    sh.env(key, value);
                }
            }
            let out = sh.output().await.expect("sh runs");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(200), "{stderr}");
            let made = world.project().join(file);
            assert!(made.is_file(), "the shell made `{file}`");
            std::fs::remove_file(&made).expect("rm");
            let path = typed.split(op).next().unwrap_or_default();
            assert!(
                stderr.contains(&format!(
                    "`{path}` has no comparison; write a check like `metrics.accuracy>=0.8` with `>=`, `<=`, `>`, `<`, `==` or `!=`; unquoted, the shell took `>` for a redirection: div's output is the file `{file}` (which it probably just made: remove it); quote the check: `--check '{typed}'`"
                )),
                "{stderr}"
            );
        }
    }
    // Sent to a log on purpose, a refusal does not guess.
    let out = world
        .command(&[
            "run",
            "--gpu",
            "cpu",
            "--check",
            "metrics.accuracy",
            "--",
            "true",
        ])
        .stdout(std::fs::File::create(world.project().join("run.log")).expect("a log"))
        .output()
        .await
        .expect("div runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("quote it, like `--check 'metrics.accuracy>=0.8'`: unquoted, a shell takes `>` and `<` for redirections"),
        "{stderr}"
    );
    assert!(world.requests().await.is_empty());
}
