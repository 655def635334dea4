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
//! cross-site requests, sign-out); here, the browser, the server and what they share. What
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

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use div_server::{DefaultImage, ImageSettings, SandboxMode, ServerOptions};
use div_test_support::{poll_until_async, wait_until_async};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::harness::Server;

/// One browser at a time: the machines running these are small.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a page has to show what a test waits for. A bound on waiting, not a claim about
/// speed: the wait ends as soon as the page shows it.
const PATIENCE: Duration = Duration::from_secs(90);

/// `ticks()`: the tick numbers the log view shows, in order.
const TICKS_FN: &str = "function ticks() { return [...document.getElementById('logview')\
    .textContent.matchAll(/tick (\\d+) /g)].map(m => Number(m[1])); }";
/// `lastTick()`: the last tick the log view shows, or -1.
const LAST_TICK_FN: &str = "function ticks() { return [...document.getElementById('logview')\
    .textContent.matchAll(/tick (\\d+) /g)].map(m => Number(m[1])); }\
    function lastTick() { const t = ticks(); return t.length ? t[t.length - 1] : -1; }";

const TICKER: &str = r#"import json, os, sys, time

def main():
    tel = open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a")
    for i in range(100000):
        print(f"\x1b[32mtick {i}\x1b[0m \x1b[1;31mwarm\x1b[0m plain", flush=True)
        tel.write(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n")
        tel.flush()
        time.sleep(0.25)
"#;

const TRAIN: &str = r#"import json, os

def main():
    tel = open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a")
    for step in range(30):
        print(f"step {step}", flush=True)
        tel.write(json.dumps({"step": step, "loss": 2.0 / (step + 1), "val_loss": 2.5 / (step + 1),
                              "opt": {"lr": 0.001 * (1 + step % 5)}}) + "\n")
    json.dump({"metrics": {"accuracy": 0.91}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// 400,000 lines of 64 bytes: 25,600,000 bytes of log, printed as fast as it can.
const BIG: &str = r#"import sys

def main():
    out = sys.stdout
    for i in range(400000):
        out.write(f"line {i:08d} " + "x" * 49 + "\n")
"#;

const LAYOUT: &str = r#"[[chart]]
title = "losses"
series = ["loss", "val_loss"]

[[chart]]
title = "learning rate"
series = ["opt.lr"]
"#;

const EVIL: &str = r#"import json, os, sys
print("<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>", flush=True)
print("<b>not bold</b> " + " ".join(sys.argv[1:]), flush=True)
json.dump({"html": "<script>window.__pwned = 3</script>", "metrics": {"accuracy": 0.9}},
          open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// The project `vision`'s files, shipped with each of its runs as `div run` ships them.
const VISION: &[(&str, &str)] = &[
    ("ticker.py", TICKER),
    ("train.py", TRAIN),
    ("evil.py", EVIL),
    ("big.py", BIG),
    ("telemetry.toml", LAYOUT),
];

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

/// The base of a dashboard URL: `http://127.0.0.1:PORT`.
fn origin(url: &str) -> String {
    url.split("/?").next().unwrap_or(url).to_owned()
}

#[allow(clippy::disallowed_methods)] // the browser is found on the test's own PATH
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Headless Chromium under chromedriver, with its own profile; both end when it drops.
struct Browser {
    client: Option<Client>,
    driver: Child,
    _profile: tempfile::TempDir,
    /// [`ONE_BROWSER`], held while this browser lives.
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Browser {
    /// Ends chromedriver and every chromium it started. Killing chromedriver alone leaves its
    /// chromium running, orphaned, with its renderers and crash handlers: 1,200 of them had
    /// piled up here after some 40 runs of the suite. chromedriver leads a process group of
    /// its own, which chromium and its renderers stay in; the crash handlers leave it, but
    /// name this browser's own folder (`HOME` and `XDG_CONFIG_HOME` point into it).
    fn drop(&mut self) {
        let group = self.driver.id();
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{group}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let left = processes_naming(self._profile.path().as_os_str().as_encoded_bytes());
        if !left.is_empty() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(&left)
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Browser {
    /// A browser, or `None` (said loudly) when chromium or chromedriver is missing.
    async fn start() -> Option<Browser> {
        let chromium = on_path("chromium").or_else(|| on_path("chromium-browser"));
        let driver = on_path("chromedriver");
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let msg = "chromium and chromedriver are not installed: the dashboard's browser \
                       tests did NOT run (apt-get install -y chromium chromium-driver)";
            #[allow(clippy::disallowed_methods)] // CI's `DIV_REQUIRE_BROWSER=1`
            let required = std::env::var_os("DIV_REQUIRE_BROWSER").is_some_and(|v| v == "1");
            if required {
                panic!("{msg}");
            }
            // A skip must be seen: written to stderr itself, past the test harness's
            // capture (which hides what a passing test prints with `eprintln!`).
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("\n!!! SKIPPED: {msg}\n\n").as_bytes(),
            );
            return None;
        };
        let one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let profile = tempfile::tempdir().expect("a profile dir");
        // chromium makes its scratch folders (org.chromium.Chromium.*) under TMPDIR and
        // leaves them: under the profile, they go with it.
        let scratch = profile.path().join("tmp");
        std::fs::create_dir_all(&scratch).expect("the browser's scratch folder");
        let mut command = Command::new(driver);
        command
            .arg(format!("--port={port}"))
            .env("HOME", profile.path())
            .env("TMPDIR", &scratch)
            .env("XDG_CONFIG_HOME", profile.path().join("config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("chromedriver starts");
        let mut browser = Browser {
            client: None,
            driver: child,
            _profile: profile,
            _one: one,
        };
        let caps: serde_json::Map<String, Value> = json!({
            "browserName": "chrome",
            // The team's dashboard is served over TLS with a certificate of the test's own CA
            // (`team.rs`), which this browser's profile does not hold.
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            },
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let webdriver = format!("http://127.0.0.1:{port}");
        let what = format!("chromedriver on {webdriver} starting chromium");
        let client = wait_until_async(what, PATIENCE, || {
            let (caps, webdriver) = (caps.clone(), webdriver.clone());
            async move {
                let connector = hyper_util::client::legacy::connect::HttpConnector::new();
                ClientBuilder::new(connector)
                    .capabilities(caps)
                    .connect(&webdriver)
                    .await
            }
        })
        .await;
        browser.client = Some(client);
        Some(browser)
    }

    fn c(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    async fn js(&self, script: &str) -> Value {
        self.c()
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("`{script}` failed in the page: {e}"))
    }

    /// Waits until `script` returns true in the page; fails saying `what` was awaited.
    async fn until(&self, what: &str, script: &str) {
        let shown = poll_until_async(PATIENCE, || async {
            match self.c().execute(script, vec![]).await {
                Ok(Value::Bool(true)) => Ok(()),
                _ => Err(()),
            }
        })
        .await;
        if shown.is_err() {
            let source = self.c().source().await.unwrap_or_default();
            panic!("the page never showed {what}; it holds:\n{source}");
        }
    }

    async fn goto(&self, url: &str) {
        self.c()
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// A screenshot of the page as it is, kept under `docs/dashboard/` with `UPDATE_DOCS=1`.
    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.c().screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        #[allow(clippy::disallowed_methods)] // `UPDATE_DOCS=1` rewrites the docs' screenshots
        let update_docs = std::env::var_os("UPDATE_DOCS").is_some();
        let dir = if update_docs {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard")
        } else {
            std::env::temp_dir().join("div-dashboard-screenshots")
        };
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }
}

/// Runs `test` on a runtime of its own (the server's tasks on its workers). A test starts
/// its browser with [`Browser::start`], which holds [`ONE_BROWSER`] while it lives.
fn on_runtime<Fut>(test: Fut)
where
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(test);
}

/// The live processes whose command line holds `needle` (zombies have none).
fn processes_naming(needle: &[u8]) -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The page's text of the element `id`.
async fn text_of(b: &Browser, id: &str) -> String {
    b.js(&format!(
        "return document.getElementById('{id}').textContent"
    ))
    .await
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

/// The session cookie a link's token is exchanged for, as a `Cookie` header's value.
fn session_cookie(port: &str, link: &str) -> String {
    let token = link.split("token=").nth(1).expect("a token");
    let answer = raw(
        port,
        &format!(
            "GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .unwrap_or_else(|| panic!("no cookie in {answer}"));
    assert!(
        cookie.contains("; HttpOnly; SameSite=Strict; Path=/"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap_or_default().to_owned();
    assert!(
        pair.starts_with(&format!("div_dashboard_{port}=")),
        "{pair}"
    );
    assert!(
        !pair.ends_with(token),
        "the link's token is not the session's"
    );
    pair
}

/// One HTTP/1.1 exchange written by hand, so a test can send what no browser would.
fn raw(port: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    s.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}
