//! The dashboard in a real browser (feature `dashboard`): Debian's `chromium`, headless,
//! driven over WebDriver (`chromedriver`) with fantoccini. div-server's `dashboard` tests (the
//! pages it serves) and div-cli's (what goes through `div`) share the browser, the project
//! whose runs they show, and the raw HTTP a browser would not send.
//!
//! Without chromium and chromedriver [`Browser::start`] says so loudly on stderr and gives
//! `None` (the test passes without a browser), unless `DIV_REQUIRE_BROWSER=1` (CI sets it)
//! makes that a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How a test finds an element in the page.
pub use fantoccini::Locator;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::{poll_until_async, wait_until_async};

/// One browser at a time: the machines running these are small.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// How long a page has to show what a test waits for. A bound on waiting, not a claim about
/// speed: the wait ends as soon as the page shows it.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// A run that ticks four times a second for ever: a coloured log line and a telemetry record
/// (`step`, `loss`) each tick.
pub const TICKER: &str = r#"import json, os, sys, time

def main():
    tel = open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a")
    for i in range(100000):
        print(f"\x1b[32mtick {i}\x1b[0m \x1b[1;31mwarm\x1b[0m plain", flush=True)
        tel.write(json.dumps({"step": i, "loss": 1.0 / (i + 1)}) + "\n")
        tel.flush()
        time.sleep(0.25)
"#;

/// Thirty steps of telemetry (nested `opt.lr` among them) and a result with an accuracy.
pub const TRAIN: &str = r#"import json, os

def main():
    tel = open(os.environ["DIVERGENT_TELEMETRY_PATH"], "a")
    for step in range(30):
        print(f"step {step}", flush=True)
        tel.write(json.dumps({"step": step, "loss": 2.0 / (step + 1), "val_loss": 2.5 / (step + 1),
                              "opt": {"lr": 0.001 * (1 + step % 5)}}) + "\n")
    json.dump({"metrics": {"accuracy": 0.91}}, open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// 400,000 lines of 64 bytes: 25,600,000 bytes of log, printed as fast as it can.
pub const BIG: &str = r#"import sys

def main():
    out = sys.stdout
    for i in range(400000):
        out.write(f"line {i:08d} " + "x" * 49 + "\n")
"#;

/// The charts `TRAIN`'s telemetry is drawn in.
pub const LAYOUT: &str = r#"[[chart]]
title = "losses"
series = ["loss", "val_loss"]

[[chart]]
title = "learning rate"
series = ["opt.lr"]
"#;

/// Markup in the log, in its arguments and in its result, each of which would set
/// `window.__pwned` if a page ran it.
pub const EVIL: &str = r#"import json, os, sys
print("<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>", flush=True)
print("<b>not bold</b> " + " ".join(sys.argv[1:]), flush=True)
json.dump({"html": "<script>window.__pwned = 3</script>", "metrics": {"accuracy": 0.9}},
          open(os.environ["DIVERGENT_RESULT_PATH"], "w"))
"#;

/// The project `vision`'s files (the scripts above and `telemetry.toml`), which the
/// dashboard's tests place their runs from.
pub const VISION: &[(&str, &str)] = &[
    ("ticker.py", TICKER),
    ("train.py", TRAIN),
    ("evil.py", EVIL),
    ("big.py", BIG),
    ("telemetry.toml", LAYOUT),
];

/// The base of a dashboard URL: `http://127.0.0.1:PORT`.
pub fn origin(url: &str) -> String {
    url.split("/?").next().unwrap_or(url).to_owned()
}

#[allow(clippy::disallowed_methods)] // the browser is found on the test's own PATH
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Headless Chromium under chromedriver, with its own profile; both end when it drops.
#[derive(Debug)]
pub struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: tempfile::TempDir,
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
        let left = processes_naming(self.profile.path().as_os_str().as_encoded_bytes());
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
    /// A browser, or `None` (said loudly) when chromium or chromedriver is missing. It holds
    /// the one browser's place while it lives: a second waits for the first to drop.
    pub async fn start() -> Option<Browser> {
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
            profile,
            _one: one,
        };
        let caps: serde_json::Map<String, Value> = json!({
            "browserName": "chrome",
            // A team's dashboard is served over TLS with a certificate of the test's own CA,
            // which this browser's profile does not hold.
            "acceptInsecureCerts": true,
            "goog:chromeOptions": {
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", browser.profile.path().display()),
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

    /// The WebDriver session.
    pub fn c(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    /// chromedriver's process group, which chromium and its renderers stay in.
    pub fn group(&self) -> u32 {
        self.driver.id()
    }

    /// The browser's own folder (its profile, `HOME` and scratch), which every process it
    /// starts names.
    pub fn profile(&self) -> &Path {
        self.profile.path()
    }

    /// What `script` returns in the page; fails saying the script when it throws.
    pub async fn js(&self, script: &str) -> Value {
        self.c()
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("`{script}` failed in the page: {e}"))
    }

    /// Waits until `script` returns true in the page; fails saying `what` was awaited, with
    /// the page's source.
    pub async fn until(&self, what: &str, script: &str) {
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

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.c()
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }

    /// A screenshot of the page as it is, kept under `docs/dashboard/` with `UPDATE_DOCS=1`
    /// (else in the temp dir's `div-dashboard-screenshots/`). Its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
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

/// The page's text of the element `id`.
pub async fn text_of(b: &Browser, id: &str) -> String {
    b.js(&format!(
        "return document.getElementById('{id}').textContent"
    ))
    .await
    .as_str()
    .unwrap_or_default()
    .to_owned()
}

/// Runs `test` on a runtime of its own (a server's tasks on its workers). A test starts its
/// browser with [`Browser::start`].
pub fn on_runtime<Fut>(test: Fut)
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

/// Runs `body` with a browser, on a runtime of its own, when there is one.
pub fn with_browser<F, Fut>(body: F)
where
    F: FnOnce(Browser) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    on_runtime(async move {
        if let Some(browser) = Browser::start().await {
            body(browser).await;
        }
    });
}

/// The live processes whose command line holds `needle` (zombies have none): their pids.
pub fn processes_naming(needle: &[u8]) -> Vec<String> {
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

/// The session cookie a dashboard link's token is exchanged for, as a `Cookie` header's
/// value; asserts the cookie's attributes and that it is not the link's token.
pub fn session_cookie(port: &str, link: &str) -> String {
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

/// One HTTP/1.1 exchange written by hand on 127.0.0.1:`port`, so a test can send what no
/// browser would. The whole answer, as text.
pub fn raw(port: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect");
    s.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}
