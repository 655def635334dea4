//! The commands around `div run` — runs, storage, secrets, image, result, telemetry, config,
//! login, completions — against a wiremock control plane: output, refusals and exit codes.
//!
//! By command: `runs.rs`, `result.rs` (and a check the shell cut), `secrets.rs`, `image.rs`,
//! `storage.rs`, `telemetry.rs`, `stop.rs` (and the grace a run sets for a stop),
//! `config.rs` (config, login, completions, man pages), `upload.rs` (what `div run` sends of
//! its code); here, what several of them use.

mod config;
mod image;
mod result;
mod runs;
mod secrets;
mod stop;
mod storage;
mod telemetry;
mod upload;

use std::process::Stdio;

use div_api::{CheckOutcome, CheckVerdict, RunStatus};
use div_test_support::mock::{json_response, mount_run};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use wiremock::matchers::{method, path};
use wiremock::{Mock, Request};

use crate::support::{Done, World, run};

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
