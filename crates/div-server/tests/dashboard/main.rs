//! The dashboard the server serves, in a real browser: Debian's `chromium`, headless, driven
//! over WebDriver (`chromedriver`) with fantoccini, against a server started in the test's own
//! process (div-server's harness), its runs placed through `POST /v1/runs` with the code and
//! command `div run` would send.
//!
//! Without chromium and chromedriver these tests say so loudly on stderr and pass, unless
//! `DIV_REQUIRE_BROWSER=1` (CI sets it) makes that a failure. With `UPDATE_DOCS=1` the
//! screenshots they take are written to `docs/dashboard/*.png`.
//!
//! By page: `list.rs` (the runs' list), `run_page.rs` (a run's page: its log, stop, its end,
//! its image), `models.rs` (the models, a model's versions and evaluations), `telemetry.rs`
//! (the telemetry tab), `security.rs` (markup inert, no secret shown, the token and the
//! origin), `team.rs` (a team's dashboard over TLS: sign-in, its session, stop by right,
//! cross-site requests, sign-out); here, the server and the project `vision` they place runs
//! for. The browser, the project's files and the HTTP written by hand are div-test-support's
//! `dashboard` (shared with div-cli's dashboard tests). What
//! goes through `div` (`div dashboard`, Place it again read back by `div run`, and the
//! benchmark `cargo xtask bench dashboard` runs) is tested in div-cli.

#[path = "../it/harness.rs"]
#[allow(dead_code)]
mod harness;

mod list;
mod models;
mod run_page;
mod security;
mod team;
mod telemetry;

use std::path::PathBuf;

use div_server::{DefaultImage, ImageSettings, SandboxMode, ServerOptions};
use div_test_support::dashboard::VISION;
use serde_json::{Value, json};

use crate::harness::Server;

/// `ticks()`: the tick numbers the log view shows, in order.
const TICKS_FN: &str = "function ticks() { return [...document.getElementById('logview')\
    .textContent.matchAll(/tick (\\d+) /g)].map(m => Number(m[1])); }";
/// `lastTick()`: the last tick the log view shows, or -1.
const LAST_TICK_FN: &str = "function ticks() { return [...document.getElementById('logview')\
    .textContent.matchAll(/tick (\\d+) /g)].map(m => Number(m[1])); }\
    function lastTick() { const t = ticks(); return t.length ? t[t.length - 1] : -1; }";

/// The image settings `div server` gives the server out of the box, its logins read from a
/// folder beside its state directory (which holds none).
fn with_settings(options: &mut ServerOptions) {
    let user_home = options
        .home
        .parent()
        .map_or_else(|| PathBuf::from("/nonexistent"), |p| p.join("user-home"));
    options.images = ImageSettings {
        default_image: DefaultImage::Host,
        insecure_registries: Vec::new(),
        credentials: div_image::CredentialSources {
            home: Some(user_home),
            ..Default::default()
        },
    };
}

/// A local control plane with two emulated H100s, as `div` starts one, and the project it
/// places runs for.
struct Local {
    server: Server,
    project: &'static str,
    files: &'static [(&'static str, &'static str)],
}

/// The project `vision` on a local control plane with two emulated H100s.
async fn vision() -> Local {
    Local::start("vision", VISION).await
}

impl Local {
    async fn start(project: &'static str, files: &'static [(&'static str, &'static str)]) -> Local {
        Local {
            server: Server::start_changed(Some("h100:2"), SandboxMode::Auto, with_settings).await,
            project,
            files,
        }
    }

    /// Places a run as `div run` places it: `words` as typed (`["train.py::main"]`, or the
    /// words after `--`), read as `div run` reads them (`Entrypoint::from_words`) into what
    /// was typed and the command it becomes, the project's code shipped (and its `telemetry.toml` as the
    /// layout) unless `fields` says `"code": null`; `fields` are the flags' fields (`sku`,
    /// `gpus`, `name`, `max_spend_cents`, `env`, `checks`, …). The run as placed.
    async fn place(&self, words: &[&str], fields: Value) -> Value {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        let entrypoint = div_spec::Entrypoint::from_words(&words).expect("an entrypoint");
        let mut body = json!({
            "project": self.project,
            "entrypoint": entrypoint.typed(),
            "command": entrypoint.command(),
            "sku": "cpu",
            "gpus": 0,
        });
        let ships = fields.get("code").is_none_or(|c| !c.is_null());
        if ships {
            body["code"] = self.server.code(self.files).await;
            if let Some((_, layout)) = self.files.iter().find(|(f, _)| *f == "telemetry.toml") {
                body["telemetry_layout"] = json!(layout);
            }
        }
        if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
            b.extend(f);
        }
        if !ships {
            body.as_object_mut().map(|b| b.remove("code"));
        }
        let (status, run) = self.server.create_run("unused", body).await;
        assert_eq!(status, 201, "{run}");
        run
    }

    /// Places a run as `div run` without `--detach` does: waits for its end. The run, ended.
    async fn place_and_wait(&self, words: &[&str], fields: Value) -> Value {
        let run = self.place(words, fields).await;
        self.server
            .wait_end(run["id"].as_str().expect("an id"))
            .await
    }

    /// The dashboard's URL, with a fresh token, as `div dashboard` asks for it.
    async fn dashboard(&self) -> String {
        let (status, link) = self.server.request("POST", "/v1/dashboard", None).await;
        assert_eq!(status, 200, "{link}");
        let url = link["url"].as_str().expect("a url").to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(url.contains("/?token="), "{url}");
        url
    }

    /// The run called `name`, as the control plane shows it.
    async fn run_json(&self, name: &str) -> Value {
        let (status, run) = self
            .server
            .request("GET", &format!("/v1/runs/{name}"), None)
            .await;
        assert_eq!(status, 200, "{run}");
        run
    }

    /// Every run, newest first, as the control plane lists them.
    async fn runs(&self) -> Value {
        let (status, runs) = self.server.request("GET", "/v1/runs?limit=200", None).await;
        assert_eq!(status, 200, "{runs}");
        runs["runs"].clone()
    }

    /// Stops the run called `name`, as `div stop` asks.
    async fn stop(&self, name: &str) {
        let (status, run) = self
            .server
            .request("POST", &format!("/v1/runs/{name}/stop"), None)
            .await;
        assert_eq!(status, 200, "{run}");
    }
}
