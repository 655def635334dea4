//! The commands around `div run` — runs, storage, secrets, image, result, telemetry, config,
//! login, completions — against a wiremock control plane: output, refusals and exit codes.

use std::process::Stdio;

use div_api::{CheckOutcome, CheckVerdict, RunStatus};
use div_test_support::mock::{error_response, json_response, mount_run};
use insta::assert_snapshot;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, Request};

use crate::support::{DIV, Done, World, run};

impl World {
    /// `div args…` with `input` on stdin (not a terminal).
    async fn div_with_stdin(&self, args: &[&str], input: &str) -> Done {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("div starts");
        let mut stdin = child.stdin.take().expect("a piped stdin");
        // `div` may refuse and exit before reading its input: that is not the test's failure.
        if let Err(e) = stdin.write_all(input.as_bytes()).await {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
        }
        drop(stdin);
        let output = child.wait_with_output().await.expect("div runs");
        Done::from_output(output, self)
    }

    async fn mount(&self, verb: &str, at: &str, response: wiremock::ResponseTemplate) {
        Mock::given(method(verb))
            .and(path(at))
            .respond_with(response)
            .mount(&self.server)
            .await;
    }

    async fn bodies(&self, verb: &str, at: &str) -> Vec<serde_json::Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r: &&Request| r.method.as_str() == verb && r.url.path() == at)
            .map(|r| serde_json::from_slice(&r.body).unwrap_or_default())
            .collect()
    }

    /// No volume yet, and `POST /v1/volumes` makes `ds` (201): what `div storage put ds …`
    /// meets first.
    async fn mount_volume_ds_made(&self) {
        self.mount(
            "GET",
            "/v1/volumes",
            json_response(200, &json!({"volumes": []})),
        )
        .await;
        self.mount(
            "POST",
            "/v1/volumes",
            json_response(
                201,
                &json!({"name": "ds", "created_at": "2025-01-01T00:00:00Z"}),
            ),
        )
        .await;
    }

    /// The bodies of the requests `verb at`, as bytes.
    async fn bodies_raw(&self, verb: &str, at: &str) -> Vec<Vec<u8>> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r: &&Request| r.method.as_str() == verb && r.url.path() == at)
            .map(|r| r.body.clone())
            .collect()
    }
}

/// Ages depend on today: `12d ago` becomes `[AGE]`.
fn no_ages(text: &str) -> String {
    text.split('\n')
        .map(|line| {
            line.split("  ")
                .map(|cell| {
                    if cell.trim_end().ends_with(" ago") {
                        "[AGE]".to_string()
                    } else {
                        cell.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn named(name: &str, status: RunStatus) -> div_api::Run {
    let mut r = run(status);
    r.name = name.into();
    r.id = format!("r_{name}");
    r
}

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

/// A command longer than any terminal, for `div runs`' last column.
const TORCHRUN: &str =
    "torchrun --nproc-per-node 8 train.py --epochs 30 --lr 0.0003 --batch-size 4096";

fn verdict(outcome: CheckOutcome, line: &str) -> CheckVerdict {
    CheckVerdict {
        check: line
            .split(": ")
            .nth(1)
            .unwrap_or_default()
            .split(" (")
            .next()
            .unwrap_or_default()
            .into(),
        outcome,
        found: Some(json!(0.91)),
        line: line.into(),
        extra: Default::default(),
    }
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

async fn mount_result(world: &World, result: serde_json::Value) {
    let mut ended = run(RunStatus::Succeeded);
    ended.checks = vec!["metrics.accuracy >= 0.8".into()];
    mount_run(&world.server, &ended).await;
    world
        .mount(
            "GET",
            "/v1/runs/r_run-k4t9/result",
            json_response(200, &result),
        )
        .await;
}

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

#[tokio::test]
async fn secrets_set_reads_stdin_never_argv() {
    let world = World::new().await;
    world
        .mount(
            "PUT",
            "/v1/secrets/HF_TOKEN",
            json_response(
                200,
                &json!({"name": "HF_TOKEN", "updated_at": "2025-01-01T00:00:00Z"}),
            ),
        )
        .await;
    let done = world
        .div_with_stdin(&["secrets", "set", "HF_TOKEN"], "hunter2\n")
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @"secret HF_TOKEN set; every run placed from now on has it (an --env of the same name wins)");
    assert_eq!(
        world.bodies("PUT", "/v1/secrets/HF_TOKEN").await,
        [json!({"value": "hunter2"})]
    );

    let file = world.project().join("key.json");
    std::fs::write(&file, "{\"k\": 1}\n").expect("write");
    let from_file = world
        .div(&["secrets", "set", "HF_TOKEN", "--from-file", "key.json"])
        .await;
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    assert_eq!(
        world.bodies("PUT", "/v1/secrets/HF_TOKEN").await[1],
        json!({"value": "{\"k\": 1}\n"}),
        "a file is sent as it is"
    );
}

#[tokio::test]
async fn secrets_refuse_a_value_in_argv_an_empty_value_and_a_bad_name() {
    let world = World::new().await;
    let argv = world.div(&["secrets", "set", "HF_TOKEN", "hunter2"]).await;
    assert_eq!(argv.code, 200);
    assert!(
        argv.stderr.contains("unexpected argument 'hunter2'"),
        "{}",
        argv.stderr
    );
    assert!(
        !argv
            .stderr
            .contains("Usage: div secrets set [OPTIONS] <NAME> <VALUE>")
    );
    let empty = world
        .div_with_stdin(&["secrets", "set", "HF_TOKEN"], "")
        .await;
    assert_eq!(empty.code, 200);
    assert!(
        empty.stderr.starts_with("error: the value is empty\n"),
        "{}",
        empty.stderr
    );
    let bad = world
        .div_with_stdin(&["secrets", "set", "HF-TOKEN"], "x")
        .await;
    assert_eq!(bad.code, 200);
    assert_snapshot!(bad.stderr, @"error: `HF-TOKEN` is not a secret name: use letters, digits and `_`, not starting with a digit");
    assert!(world.requests().await.is_empty());
}

#[tokio::test]
async fn secrets_ls_shows_names_and_dates_and_rm_removes() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/secrets",
            json_response(
                200,
                &json!({"secrets": [{"name": "HF_TOKEN", "updated_at": "2025-01-01T00:00:00Z"}]}),
            ),
        )
        .await;
    world
        .mount(
            "DELETE",
            "/v1/secrets/HF_TOKEN",
            wiremock::ResponseTemplate::new(204),
        )
        .await;
    world
        .mount(
            "DELETE",
            "/v1/secrets/NOPE",
            error_response(404, "not_found", "no secret", json!(null)),
        )
        .await;
    let ls = world.div(&["secrets", "ls"]).await;
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert_snapshot!(ls.stdout, @r"
    NAME      UPDATED
    HF_TOKEN  2025-01-01T00:00:00Z
    ");
    let rm = world.div(&["secrets", "rm", "HF_TOKEN"]).await;
    assert_eq!(
        (rm.code, rm.stderr.as_str()),
        (0, "secret HF_TOKEN removed\n")
    );
    let missing = world.div(&["secrets", "rm", "NOPE"]).await;
    assert_eq!(missing.code, 200);
    assert_snapshot!(missing.stderr, @r"
    error: there is no secret `NOPE`
    hint: `div secrets ls` lists them
    ");
}

/// `div image` reads and prunes the control plane's image cache through its API; one that
/// keeps none (it answers the routes 404, as a hosted or older one does) says so.
#[tokio::test]
async fn image_ls_and_prune_go_through_the_control_plane() {
    let world = World::new().await;
    let digest = format!("sha256:{}", "ab".repeat(32));
    world
        .mount(
            "GET",
            "/v1/images",
            json_response(
                200,
                &json!({
                    "path": "/srv/div/images",
                    "images": [{
                        "digest": digest,
                        "references": ["127.0.0.1:5000/tools/busybox:1"],
                        "resolved": [{
                            "reference": "127.0.0.1:5000/tools/busybox:1",
                            "resolved_at": "2026-12-02T00:31:07Z",
                        }],
                        "compressed_bytes": 1_200_000,
                        "downloaded_bytes": 300_000,
                        "unpacked_bytes": 2_400_000,
                    }, {
                        // An older control plane's, or one no tag names any more.
                        "digest": format!("sha256:{}", "cd".repeat(32)),
                        "references": [],
                        "compressed_bytes": 900_000,
                        "unpacked_bytes": 1_000,
                    }],
                    "disk": {"blobs": 1_200_000, "images": 2_400_000, "tmp": 0},
                }),
            ),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/images/prune",
            json_response(
                200,
                &json!({"images": [digest], "blobs": 3, "bytes": 3_600_000, "kept": 0}),
            ),
        )
        .await;
    let ls = world.div(&["image", "ls"]).await;
    assert_eq!(ls.code, 0, "{}", ls.stderr);
    assert_eq!(
        ls.stdout,
        "IMAGE\tDIGEST\tRESOLVED\tDOWNLOADED\tUNPACKED\n\
         127.0.0.1:5000/tools/busybox:1\tsha256:abababababab\t2026-12-02T00:31:07Z\t300.0 KB\t2.4 MB\n\
         <none>\tsha256:cdcdcdcdcdcd\t-\t-\t1.0 KB\n"
    );
    assert_snapshot!(ls.stderr, @"2 images cached in /srv/div/images: 3.6 MB on disk (1.2 MB of blobs, 2.4 MB unpacked, 0 B in progress)");
    let prune = world.div(&["image", "prune"]).await;
    assert_eq!(prune.code, 0, "{}", prune.stderr);
    assert_snapshot!(prune.stderr, @"removed 1 image and 3 blobs, 3.6 MB freed; kept 0 that queued or running runs use");
    assert_eq!(world.bodies("POST", "/v1/images/prune").await, [json!({})]);

    let without = World::new().await;
    for args in [["image", "ls"], ["image", "prune"]] {
        let out = without.div(&args).await;
        assert_eq!(out.code, 200, "{}", out.stderr);
        let what = if args[1] == "ls" { "list" } else { "prune" };
        assert_eq!(
            out.stderr,
            format!(
                "error: this control plane has no image cache to {what}\nhint: `div image` is for the local control plane's own cache; a hosted control plane keeps its images itself\n"
            )
        );
    }
}

#[tokio::test]
async fn storage_rm_needs_a_terminal_or_yes() {
    let world = World::new().await;
    world
        .mount(
            "DELETE",
            "/v1/volumes/data",
            wiremock::ResponseTemplate::new(204),
        )
        .await;
    let refused = world
        .div_with_stdin(&["storage", "rm", "data"], "y\n")
        .await;
    assert_eq!(refused.code, 200);
    assert_snapshot!(refused.stderr, @r"
    error: removing volume `data` needs a confirmation, and there is no terminal to ask on
    hint: pass `--yes`: `div storage rm data --yes`
    ");
    assert!(world.requests().await.is_empty());
    let done = world.div(&["storage", "rm", "data", "--yes"]).await;
    assert_eq!(
        (done.code, done.stderr.as_str()),
        (0, "volume data removed\n")
    );
    assert_eq!(world.requests().await, ["DELETE /v1/volumes/data"]);
}

#[tokio::test]
async fn storage_ls_lists_volumes_and_what_one_holds() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/volumes",
            json_response(200, &json!({"volumes": [{"name": "data", "created_at": "2025-01-01T00:00:00Z", "size_bytes": 1500}]})),
        )
        .await;
    world
        .mount(
            "GET",
            "/v1/volumes/data/tree",
            json_response(
                200,
                &json!({"entries": [
                    {"path": "train", "kind": "dir"},
                    {"path": "train/a.csv", "kind": "file", "size": 1500},
                    {"path": "train/deep/b.csv", "kind": "file", "size": 500},
                    {"path": "readme.md", "kind": "file", "size": 12}
                ]}),
            ),
        )
        .await;
    let volumes = world.div(&["storage", "ls"]).await;
    assert_eq!(volumes.code, 0, "{}", volumes.stderr);
    assert_snapshot!(volumes.stdout, @r"
    NAME  SIZE    CREATED
    data  1.5 KB  2025-01-01T00:00:00Z
    ");
    let inside = world.div(&["storage", "ls", "data"]).await;
    assert_eq!(inside.code, 0, "{}", inside.stderr);
    assert_snapshot!(inside.stdout, @r"
    12 B    readme.md
    2.0 KB  train/
    ");
    let everything = world.div(&["storage", "ls", "-r", "data"]).await;
    assert_eq!(everything.code, 0, "{}", everything.stderr);
    assert_snapshot!(everything.stdout, @r"
    -       train/
    1.5 KB  train/a.csv
    500 B   train/deep/b.csv
    12 B    readme.md
    ");
    let bad = world.div(&["storage", "ls", "data/../etc"]).await;
    assert_eq!(bad.code, 200);
    assert!(
        bad.stderr
            .starts_with("error: `data/../etc` is not a place in a volume"),
        "{}",
        bad.stderr
    );
}

#[tokio::test]
async fn storage_put_sends_only_what_the_volume_lacks_and_commits_at_the_root() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::write(data.join("a.txt"), "a\n").expect("write");
    std::fs::write(data.join("sub/b.txt"), "bb\n").expect("write");
    let hash_a = blake3::hash(b"a\n").to_hex().to_string();
    let hash_b = blake3::hash(b"bb\n").to_hex().to_string();
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": [hash_b]})),
        )
        .await;
    world
        .mount(
            "PUT",
            &format!("/v1/volumes/ds/blobs/{hash_b}"),
            wiremock::ResponseTemplate::new(201),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 2, "bytes": 5}),
            ),
        )
        .await;
    let done = world
        .div(&["storage", "put", "ds", "data", "--to", "v1"])
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @r"
    new volume ds
    2 files, 5 B → ds/v1
    ");
    let puts: Vec<String> = world
        .requests()
        .await
        .into_iter()
        .filter(|r| r.starts_with("PUT"))
        .collect();
    assert_eq!(
        puts,
        [format!("PUT /v1/volumes/ds/blobs/{hash_b}")],
        "only the missing blob is sent"
    );
    let tree = &world.bodies("POST", "/v1/volumes/ds/trees").await[0];
    assert_eq!(tree["path"], "");
    assert_eq!(tree["entries"][0]["path"], "v1/a.txt");
    assert_eq!(tree["entries"][0]["hash"], hash_a.as_str());
    assert_eq!(tree["entries"][1]["path"], "v1/sub/b.txt");
}

#[tokio::test]
async fn storage_put_refuses_to_replace_and_bad_places_reach_nothing() {
    let world = World::new().await;
    std::fs::write(world.project().join("a.txt"), "a\n").expect("write");
    let bad_to = world
        .div(&["storage", "put", "ds", "a.txt", "--to", "../x"])
        .await;
    assert_eq!(bad_to.code, 200, "{}", bad_to.stderr);
    let bad_name = world
        .div(&["storage", "put", "Not A Volume", "a.txt"])
        .await;
    assert_eq!(bad_name.code, 200, "{}", bad_name.stderr);
    let missing = world.div(&["storage", "put", "ds", "nope"]).await;
    assert_eq!(missing.code, 200, "{}", missing.stderr);
    assert!(world.requests().await.is_empty());

    world
        .mount(
            "GET",
            "/v1/volumes",
            json_response(200, &json!({"volumes": []})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes",
            json_response(
                200,
                &json!({"name": "ds", "created_at": "2025-01-01T00:00:00Z"}),
            ),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": []})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            error_response(
                409,
                "conflict",
                "holds something else",
                json!({"path": "a.txt"}),
            ),
        )
        .await;
    let conflict = world.div(&["storage", "put", "ds", "a.txt"]).await;
    assert_eq!(conflict.code, 200);
    assert_snapshot!(conflict.stderr, @r"
    error: `a.txt` in volume `ds` is in the way of the put: holds something else
    hint: put it somewhere new in the volume with `--to DIR`, or into another volume
    ");
}

#[tokio::test]
async fn storage_get_never_overwrites() {
    let world = World::new().await;
    world
        .mount(
            "GET",
            "/v1/volumes/ds/tree",
            json_response(
                200,
                &json!({"entries": [{"path": "a.txt", "kind": "file", "size": 2}]}),
            ),
        )
        .await;
    world
        .mount(
            "GET",
            "/v1/volumes/ds/file",
            wiremock::ResponseTemplate::new(200).set_body_bytes("a\n"),
        )
        .await;
    let done = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_snapshot!(done.stderr, @"ds → out: 1 file, 2 B");
    assert_eq!(
        std::fs::read_to_string(world.project().join("out/a.txt"))
            .ok()
            .as_deref(),
        Some("a\n")
    );
    let again = world.div(&["storage", "get", "ds", "out"]).await;
    assert_eq!(again.code, 200);
    assert_snapshot!(again.stderr, @r"
    error: `[TMP]/very-cool-classifier/out/a.txt` already exists
    hint: get it into a new directory, or move the file away first
    ");
}

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
async fn config_says_where_each_setting_came_from_and_never_shows_the_token() {
    let world = World::new().await;
    let output = world
        .command(&["config"])
        .env("DIVERGENT_TOKEN", "s3cret-token")
        .env("DIVERGENT_PROJECT", "other")
        .output()
        .await
        .expect("div runs");
    let done = Done::from_output(output, &world);
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(!done.stdout.contains("s3cret"), "{}", done.stdout);
    let line = |name: &str| {
        done.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(line("api_url"), "api_url [API] (DIVERGENT_API_URL)");
    assert_eq!(line("token"), "token <redacted> (DIVERGENT_TOKEN)");
    assert_eq!(line("project"), "project other (DIVERGENT_PROJECT)");
    assert_eq!(
        line("api_timeout"),
        "api_timeout 3s (DIVERGENT_API_TIMEOUT)"
    );
}

#[tokio::test]
async fn login_stores_the_token_owner_only_and_config_reads_it_back() {
    use std::os::unix::fs::PermissionsExt;
    let world = World::new().await;
    let done = world
        .div_with_stdin(
            &["login", "--api-url", "https://api.example.com"],
            "tok-123\n",
        )
        .await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let file = world.tmp.path().join("home/.config/div/config.json");
    let meta = std::fs::metadata(&file).expect("the config file");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("json");
    assert_eq!(
        stored,
        json!({"api_url": "https://api.example.com", "token": "tok-123"})
    );
    assert!(!done.stderr.contains("tok-123"));

    let output = world
        .command(&["config", "--json"])
        .env_remove("DIVERGENT_API_URL")
        .output()
        .await
        .expect("div runs");
    let config = Done::from_output(output, &world);
    assert!(!config.stdout.contains("tok-123"), "{}", config.stdout);
    let v: serde_json::Value = serde_json::from_str(&config.stdout).expect("json");
    assert_eq!(v[0]["value"], "https://api.example.com");
    assert_eq!(
        v[1],
        json!({"name": "token", "value": "<redacted>", "from": "[TMP]/home/.config/div/config.json"})
    );

    let bad = world
        .div_with_stdin(&["login", "--api-url", "ftp://x"], "t\n")
        .await;
    assert_eq!(bad.code, 200, "{}", bad.stderr);
}

#[test]
fn completions_and_the_man_page_generate() {
    for what in ["bash", "zsh", "fish", "man"] {
        let output = std::process::Command::new(DIV)
            .args(["__generate", what])
            .output()
            .expect("div runs");
        assert!(output.status.success(), "{what}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.len() > 500, "{what}: {text}");
        assert!(
            text.contains("run") && text.contains("storage"),
            "{what} mentions the commands"
        );
    }
}

#[test]
fn a_man_page_for_every_command_goes_into_a_folder() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path().join("man1");
    let output = std::process::Command::new(DIV)
        .args(["__generate", "man", "--dir"])
        .arg(&dir)
        .output()
        .expect("div runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut pages: Vec<String> = std::fs::read_dir(&dir)
        .expect("the folder was made")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    pages.sort();
    for page in [
        "div.1",
        "div-run.1",
        "div-storage-put.1",
        "div-secrets-set.1",
        "div-server-start.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} in {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.contains("__")),
        "hidden commands get no page: {pages:?}"
    );
    let run = std::fs::read_to_string(dir.join("div-run.1")).expect("div-run.1");
    assert!(run.contains(r"\-\-max\-spend"), "{run}");

    let refused = std::process::Command::new(DIV)
        .args(["__generate", "bash", "--dir"])
        .arg(&dir)
        .output()
        .expect("div runs");
    assert_eq!(refused.status.code(), Some(200));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("`--dir` goes with `man` only; completions are one file, on stdout")
    );
}

#[tokio::test]
async fn unchanged_code_the_control_plane_holds_sends_neither_hashes_nor_tree() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // The control plane holds the tree: it answers the question with the digest asked.
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex("^/v1/volumes/[^/]+/trees$"))
        .respond_with(|req: &Request| {
            let get = |key: &str| {
                req.url
                    .query_pairs()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            };
            json_response(
                200,
                &json!({"volume": "very-cool-classifier-code", "path": get("path"), "files": 1, "bytes": 27, "digest": get("digest")}),
            )
        })
        .mount(&world.server)
        .await;
    let done = world.div(&["run", "--detach", "train.py::run"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /v1/volumes/very-cool-classifier-code/trees")),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.ends_with("/blobs/missing")
            || r.starts_with("POST /v1/volumes/very-cool-classifier-code/trees")),
        "the hashes or the tree were sent: {requests:?}"
    );
    // The placed run names the code at the path asked about.
    let asked = world
        .server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .find(|r| r.method.as_str() == "GET" && r.url.path().ends_with("/trees"))
        .expect("the question");
    let path = asked
        .url
        .query_pairs()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.into_owned())
        .expect("a path");
    assert_eq!(world.placed_body().await["code"]["path"], path.as_str());
}

#[tokio::test]
async fn a_control_plane_that_does_not_hold_the_tree_gets_it_the_whole_way() {
    let world = World::new().await;
    world
        .mount_placing(&run(RunStatus::Queued), &[], &run(RunStatus::Succeeded))
        .await;
    // No answer for the question (a 404, as from a control plane that does not know it).
    let done = world.div(&["run", "--detach", "train.py::run"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        requests.iter().any(|r| r.ends_with("/blobs/missing"))
            && requests
                .iter()
                .any(|r| r.starts_with("POST /v1/volumes/very-cool-classifier-code/trees")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn small_files_go_together_in_one_pack_when_the_control_plane_takes_packs() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let mut hashes = Vec::new();
    for i in 0..50 {
        let text = format!("file {i}\n");
        std::fs::write(data.join(format!("f{i}.txt")), &text).expect("write");
        hashes.push(blake3::hash(text.as_bytes()).to_hex().to_string());
    }
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": hashes})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 50, "held": 0})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 50, "bytes": 390}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let requests = world.requests().await;
    assert!(
        !requests.iter().any(|r| r.starts_with("PUT")),
        "a file went by itself: {requests:?}"
    );
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 1, "{requests:?}");
    let blobs = div_api::parse_pack(&packs[0]).expect("a pack");
    let mut sent: Vec<&str> = blobs.iter().map(|(h, _)| *h).collect();
    sent.sort_unstable();
    let mut wanted: Vec<&str> = hashes.iter().map(String::as_str).collect();
    wanted.sort_unstable();
    assert_eq!(sent, wanted);
    for (hash, bytes) in blobs {
        assert_eq!(blake3::hash(bytes).to_hex().as_str(), hash);
    }
}

/// More small files than one pack carries (4,096) go in two packs, each file in one of
/// them once: the next pack is read while the one before is sent.
#[tokio::test]
async fn small_files_past_one_packs_count_go_in_two_packs_each_once() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let mut hashes = Vec::new();
    for i in 0..4100 {
        let text = format!("file {i}\n");
        std::fs::write(data.join(format!("f{i}.txt")), &text).expect("write");
        hashes.push(blake3::hash(text.as_bytes()).to_hex().to_string());
    }
    world.mount_volume_ds_made().await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": hashes})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 1, "held": 0})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 4100, "bytes": 1}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 2);
    let mut sent: Vec<String> = Vec::new();
    for pack in &packs {
        for (hash, bytes) in div_api::parse_pack(pack).expect("a pack") {
            assert_eq!(blake3::hash(bytes).to_hex().as_str(), hash);
            sent.push(hash.to_owned());
        }
    }
    assert_eq!(sent.len(), 4100, "a file was sent twice or not at all");
    sent.sort_unstable();
    let mut wanted = hashes.clone();
    wanted.sort_unstable();
    assert_eq!(sent, wanted);
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

/// The server's retention of code snapshots can let go a blob between "which blobs do you
/// lack" and the commit: the commit is refused naming it, and the client asks again, sends
/// it and commits, once.
#[tokio::test]
async fn a_commit_refused_for_blobs_let_go_meanwhile_sends_them_again_and_commits() {
    let world = World::new().await;
    let data = world.project().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("a.txt"), "alpha\n").expect("write");
    let hash = blake3::hash(b"alpha\n").to_hex().to_string();
    world.mount_volume_ds_made().await;
    // First asked: the volume holds it. Asked again: it lacks it.
    Mock::given(method("POST"))
        .and(path("/v1/volumes/ds/blobs/missing"))
        .respond_with(json_response(200, &json!({"missing": []})))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&world.server)
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/missing",
            json_response(200, &json!({"missing": [hash]})),
        )
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/blobs/pack",
            json_response(200, &json!({"stored": 1, "held": 0})),
        )
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/volumes/ds/trees"))
        .respond_with(error_response(
            422,
            "invalid",
            "1 blob(s) of the tree were not sent",
            json!({"missing": [hash]}),
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&world.server)
        .await;
    world
        .mount(
            "POST",
            "/v1/volumes/ds/trees",
            json_response(
                201,
                &json!({"volume": "ds", "path": "", "files": 1, "bytes": 6}),
            ),
        )
        .await;
    let done = world.div(&["storage", "put", "ds", "data"]).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert_eq!(
        world
            .bodies("POST", "/v1/volumes/ds/blobs/missing")
            .await
            .len(),
        2
    );
    let packs = world.bodies_raw("POST", "/v1/volumes/ds/blobs/pack").await;
    assert_eq!(packs.len(), 1, "sent once, after the refusal");
    let blobs = div_api::parse_pack(&packs[0]).expect("a pack");
    assert_eq!(blobs.len(), 1);
    assert_eq!(blobs[0].0, hash);
    assert_eq!(world.bodies("POST", "/v1/volumes/ds/trees").await.len(), 2);
}
