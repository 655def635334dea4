//! Running the real `div` binary against one wiremock server per test.

use std::path::{Path, PathBuf};
use std::process::Output;

use div_api::{Catalogue, Run, RunStatus, SkuOffer};
use div_test_support::mock::{
    json_response, log_body, mock_server, mount_catalogue, mount_log, mount_run,
};
use serde_json::json;
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer};

pub(crate) const DIV: &str = env!("CARGO_BIN_EXE_div");

/// The first line of the log of a run that names no image, on a local control plane where
/// this machine's system stands in for the default image (out of the box).
pub(crate) const HOST_LINE: &str = "div: no image pulled: this machine's own system stands in for pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime (DIVERGENT_DEFAULT_IMAGE=host; set it to pull to run in the image itself)\n";

/// div-run.md's catalogue.
pub(crate) fn catalogue() -> Catalogue {
    let sku = |name: &str, cents, gib| SkuOffer {
        name: name.into(),
        cents_per_hour: cents,
        cores_per_unit: 1,
        memory_gib_per_unit: gib,
        capacity: None,
        emulated: false,
        extra: Default::default(),
    };
    Catalogue {
        skus: vec![
            sku("b300", 895, 8),
            sku("h200", 595, 8),
            sku("h100", 495, 8),
            sku("cpu", 30, 2),
        ],
        extra_core_cents_per_hour: 17,
        extra_gib_cents_per_hour: 3,
        max_cores: 64,
        max_memory_gib: 336,
        max_run_seconds: 86_400,
        extra: Default::default(),
    }
}

/// A test's world: a control plane, a project directory with a `train.py`, a home.
pub(crate) struct World {
    pub(crate) server: MockServer,
    pub(crate) tmp: tempfile::TempDir,
}

/// How long one call of `div` to the mock control plane may take (`DIVERGENT_API_TIMEOUT`),
/// in seconds. A bound, not a speed: wiremock answers at once, but beside the fault suite on
/// two cores a first request once took over 3 s (`.ci/stress`), which was the bound then. A
/// test of a call that times out sets a short one itself.
pub(crate) const API_TIMEOUT: &str = "30";

impl World {
    pub(crate) async fn new() -> World {
        let server = mock_server().await;
        mount_catalogue(&server, &catalogue()).await;
        let tmp = tempfile::tempdir().expect("a temp dir");
        let project = tmp.path().join("very-cool-classifier");
        std::fs::create_dir_all(&project).expect("mkdir");
        std::fs::write(project.join("train.py"), "def run():\n    print('hi')\n").expect("write");
        World { server, tmp }
    }

    pub(crate) fn project(&self) -> PathBuf {
        self.tmp.path().join("very-cool-classifier")
    }

    /// `div args…` in the project directory.
    pub(crate) async fn div(&self, args: &[&str]) -> Done {
        let output = self.command(args).output().await.expect("div runs");
        Done::new(output, self)
    }

    pub(crate) fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(DIV);
        c.args(args)
            .current_dir(self.project())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.tmp.path().join("div-home"))
            .env("DIVERGENT_API_URL", self.server.uri())
            .env("DIVERGENT_API_TIMEOUT", API_TIMEOUT)
            .env("NO_COLOR", "1");
        c
    }

    /// The methods and paths of every request the control plane received.
    pub(crate) async fn requests(&self) -> Vec<String> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .map(|r| format!("{} {}", r.method, r.url.path()))
            .collect()
    }

    /// The JSON body of the request that placed the run.
    pub(crate) async fn placed_body(&self) -> serde_json::Value {
        let create = self
            .server
            .received_requests()
            .await
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.method.as_str() == "POST" && r.url.path() == "/v1/runs")
            .expect("a run was placed");
        serde_json::from_slice(&create.body).expect("the request is JSON")
    }

    /// Asserts no request but reads (and the question whether a run would be placed, which
    /// creates nothing) reached the control plane: nothing was created.
    pub(crate) async fn assert_nothing_created(&self) {
        let requests = self.requests().await;
        assert!(
            requests
                .iter()
                .all(|r| r.starts_with("GET ") || r == "POST /v1/runs/validate"),
            "only reads may reach the server before everything is checked: {requests:?}"
        );
    }

    /// Mount what shipping and placing `run` need, and a log of `chunks` ending with `ended`.
    pub(crate) async fn mount_placing(&self, placed: &Run, chunks: &[&[u8]], ended: &Run) {
        let s = &self.server;
        Mock::given(method("POST"))
            .and(path("/v1/volumes"))
            .respond_with(json_response(
                201,
                &json!({"name": "very-cool-classifier-code", "created_at": "2025-01-01T00:00:00Z"}),
            ))
            .mount(s)
            .await;
        Mock::given(method("GET"))
            .and(path("/v1/volumes"))
            .respond_with(json_response(200, &json!({"volumes": []})))
            .mount(s)
            .await;
        Mock::given(method("POST"))
            .and(path_regex("^/v1/volumes/[^/]+/blobs/missing$"))
            .respond_with(json_response(200, &json!({"missing": []})))
            .mount(s)
            .await;
        Mock::given(method("POST"))
            .and(path_regex("^/v1/volumes/[^/]+/trees$"))
            .respond_with(json_response(201, &json!({"volume": "very-cool-classifier-code", "path": "code/x", "files": 1, "bytes": 1})))
            .mount(s)
            .await;
        Mock::given(method("POST"))
            .and(path("/v1/runs"))
            .respond_with(json_response(201, placed))
            .mount(s)
            .await;
        mount_run(s, ended).await;
        mount_log(s, &placed.id, log_body(chunks, ended)).await;
    }
}

/// A run named `run-k4t9`.
pub(crate) fn run(status: RunStatus) -> Run {
    let mut run = div_test_support::mock::sample_run("run-k4t9", status);
    run.cores = 1;
    run.memory_gib = 8;
    run.max_spend_cents = None;
    run
}

/// A finished `div`: exit code and output, temp paths and ports filtered.
pub(crate) struct Done {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Done {
    pub(crate) fn from_output(output: Output, world: &World) -> Done {
        Done::new(output, world)
    }

    fn new(output: Output, world: &World) -> Done {
        let filter = |b: &[u8]| {
            filter(
                &String::from_utf8_lossy(b),
                world.tmp.path(),
                &world.server.uri(),
            )
        };
        Done {
            code: output.status.code().unwrap_or(-1),
            stdout: filter(&output.stdout),
            stderr: filter(&output.stderr),
        }
    }
}

pub(crate) fn filter(text: &str, tmp: &Path, uri: &str) -> String {
    text.replace(&*tmp.to_string_lossy(), "[TMP]")
        .replace(uri, "[API]")
}

/// A temp home and one project on the real local control plane (no mock): `div` started
/// with a clean environment in the project's folder; the server it starts in the background
/// is stopped when this is dropped. One harness for every test file that runs the real thing.
pub(crate) struct Local {
    pub(crate) tmp: tempfile::TempDir,
    name: &'static str,
    gpus: Option<&'static str>,
}

impl Local {
    /// The project `name` holding `files` (`(path, text)`).
    pub(crate) fn new(name: &'static str, files: &[(&str, &str)]) -> Local {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let project = tmp.path().join(name);
        std::fs::create_dir_all(&project).expect("mkdir");
        for (path, text) in files {
            let file = project.join(path);
            std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
            std::fs::write(file, text).expect("write");
        }
        Local {
            tmp,
            name,
            gpus: None,
        }
    }

    /// Every `div` of this project asks for emulated GPUs (`DIVERGENT_EMULATE_GPUS`).
    pub(crate) fn emulating(mut self, gpus: &'static str) -> Local {
        self.gpus = Some(gpus);
        self
    }

    pub(crate) fn project(&self) -> PathBuf {
        self.tmp.path().join(self.name)
    }

    /// The state directory (`DIVERGENT_HOME`).
    pub(crate) fn home(&self) -> PathBuf {
        self.tmp.path().join("div-home")
    }

    /// `div args…` in the project, with only `PATH`, `HOME`, `DIVERGENT_HOME`, `NO_COLOR`
    /// (and the emulated GPUs) set.
    pub(crate) fn command(&self, args: &[&str]) -> std::process::Command {
        self.command_of(Path::new(DIV), args)
    }

    /// As `command`, with the `div` executable at `div`.
    pub(crate) fn command_of(&self, div: &Path, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(div);
        c.args(args)
            .current_dir(self.project())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.tmp.path().join("home"))
            .env("DIVERGENT_HOME", self.home())
            .env("NO_COLOR", "1");
        if let Some(gpus) = self.gpus {
            c.env("DIVERGENT_EMULATE_GPUS", gpus);
        }
        c
    }

    pub(crate) fn div(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("div runs")
    }

    /// Waits until every ended run's supervisor has let its places go: once a run's end is
    /// recorded, its supervisor removes its scratch places (workspace, overlay, `/tmp`,
    /// `/mnt`), then `end.reserve`, and exits. A test that compares what is on disk waits for
    /// that, not for the end alone.
    pub(crate) fn wait_let_go(&self) {
        let runs = self.home().join("runs");
        div_test_support::wait_until(
            "every ended run's places let go",
            std::time::Duration::from_secs(60),
            || {
                let held: Vec<String> = std::fs::read_dir(&runs)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|d| {
                        d.path().join("end.json").exists() && d.path().join("end.reserve").exists()
                    })
                    .map(|d| d.file_name().to_string_lossy().into_owned())
                    .collect();
                if held.is_empty() {
                    Ok(())
                } else {
                    Err(format!("still held: {held:?}"))
                }
            },
        );
    }
}

/// When the test ends, pass or panic: every run it placed that is still going is stopped
/// (`div runs --all --json`, `div stop` each, within a bound), then the server; a run left
/// going would go on with its home deleted under it.
impl Drop for Local {
    fn drop(&mut self) {
        div_test_support::leftovers::stop_runs_with_div(
            &|args| self.command(args),
            &self.home(),
            self.tmp.path(),
        );
        let _ = self.div(&["server", "stop"]);
    }
}

/// Bytes as text, for messages.
pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
