//! The dashboard in a real browser: Debian's `chromium`, headless, driven over WebDriver
//! (`chromedriver`) with fantoccini, against the real `div` and its local control plane: what
//! goes through `div`. The pages the server serves (the runs' list, a run's page, the models,
//! the telemetry tab, the pages' security, a team's dashboard over TLS) are tested where they
//! are served, in div-server's `dashboard` tests.
//!
//! Without chromium and chromedriver these tests say so loudly on stderr and pass, unless
//! `DIV_REQUIRE_BROWSER=1` (CI sets it) makes that a failure. (The screenshots in
//! `docs/dashboard/` are taken by div-server's `dashboard` tests.)
//!
//! By subject: `command.rs` (`div dashboard` and the browser the tests drive), `replay.rs`
//! (a run page's Place it again, run by a shell and read back by `div run`), `bench.rs` (the
//! list with many runs stored, which `cargo xtask bench dashboard` runs); here, the browser
//! and what they share.

mod bench;
mod command;
mod replay;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use div_test_support::{poll_until_async, wait_until_async};
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::support::Local;

/// One browser at a time: the machines running these are small.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a page has to show what a test waits for. A bound on waiting, not a claim about
/// speed: the wait ends as soon as the page shows it.
const PATIENCE: Duration = Duration::from_secs(90);

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

/// The project `vision` on the local control plane, with two emulated H100s.
fn vision() -> Local {
    Local::new(
        "vision",
        &[
            ("ticker.py", TICKER),
            ("train.py", TRAIN),
            ("evil.py", EVIL),
            ("big.py", BIG),
            ("telemetry.toml", LAYOUT),
        ],
    )
    .emulating("h100:2")
}

impl Local {
    /// `div args…`, which must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.div(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "div {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The dashboard's URL, with a fresh token.
    fn dashboard(&self) -> String {
        let url = self.ok(&["dashboard"]);
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(url.contains("/?token="), "{url}");
        url
    }
}

/// The base of a dashboard URL: `http://127.0.0.1:PORT`.
fn origin(url: &str) -> String {
    url.split("/?").next().unwrap_or(url).to_owned()
}

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
            if std::env::var_os("DIV_REQUIRE_BROWSER").is_some_and(|v| v == "1") {
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
        };
        let caps: serde_json::Map<String, Value> = json!({
            "browserName": "chrome",
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
}

/// Runs `body` with one browser, when there is one.
fn with_browser<F, Fut>(body: F)
where
    F: FnOnce(Browser) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _one = ONE_BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        if let Some(browser) = Browser::start().await {
            body(browser).await;
        }
    });
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

impl Local {
    /// The run called `name`, as `div runs --json --all` shows it.
    fn run_json(&self, name: &str) -> Value {
        let runs: Value =
            serde_json::from_str(&self.ok(&["runs", "--json", "--all"])).expect("json");
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no run `{name}` in {runs}"))
    }
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

/// A `div` that writes the arguments it was given to `$DIV_ARGS`, each ended by a NUL.
const FAKE_DIV: &str = "#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$DIV_ARGS\"\n";

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
