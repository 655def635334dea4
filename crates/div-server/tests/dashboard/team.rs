//! A team's dashboard in the browser (docs/team.md), served over TLS by the team's listener:
//! a member signs in with their token once (never in a URL), the session is an `HttpOnly`,
//! `SameSite=Strict` cookie no script reads, stopping needs the right `div stop` needs, a
//! page of another site cannot stop a run, and signing out ends the session on the server.
//!
//! The team's server is started here as `div server start --listen 127.0.0.1:PORT
//! --tls-cert … --tls-key …` starts it (its `team` listener), with a CA and a certificate
//! `openssl` makes for the test; members are added by the owner over the Unix socket (as
//! `div server users add` adds them) and place their runs over TLS with their own tokens.

use std::sync::Arc;

use div_server::{SandboxMode, TeamListen, TlsFiles};
use div_test_support::dashboard::{Browser, Locator, on_runtime};
use div_test_support::tls::certificates;
use serde_json::{Value, json};

use super::with_settings;
use crate::harness::Server;

/// A program that runs until stopped, saying so.
const TRAIN: &str =
    "import time\n\ndef main():\n    print('training', flush=True)\n    time.sleep(600)\n";

/// The owner's control plane, served to a team on a loopback port over TLS.
struct Team {
    server: Server,
    certs: tempfile::TempDir,
    port: u16,
}

impl Team {
    /// A CA, a certificate for `localhost`, and the owner's control plane serving it on a free
    /// loopback port.
    async fn start() -> Team {
        let certs = tempfile::tempdir().expect("a temp dir");
        certificates(certs.path());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let tls = TlsFiles {
            cert: certs.path().join("server.pem"),
            key: certs.path().join("server.key"),
        };
        let server = Server::start_changed(Some("h100:2"), SandboxMode::Auto, |options| {
            with_settings(options);
            // Each run's own disk is 1 GiB here, as in div-cli's team tests: a control plane
            // backs the disks of its runs with the free space it sees.
            std::fs::create_dir_all(&options.home).expect("the state directory");
            std::fs::write(options.home.join("settings.json"), r#"{"run_disk_gib": 1}"#)
                .expect("settings.json");
            options.team = Some(TeamListen {
                addr: ([127, 0, 0, 1], port).into(),
                tls: Some(tls),
            });
        })
        .await;
        Team {
            server,
            certs,
            port,
        }
    }

    /// Where members reach it.
    fn url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// The test CA's certificate, which the test's own requests trust.
    fn ca(&self) -> std::path::PathBuf {
        self.certs.path().join("ca.pem")
    }

    /// Adds `name` with `role`, as the owner (`div server users add`): its token.
    async fn add(&self, name: &str, role: &str) -> String {
        let (status, created) = self
            .server
            .request(
                "POST",
                "/v1/members",
                Some(json!({"name": name, "role": role})),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        let token = created["token"].as_str().expect("a token").to_owned();
        assert!(token.starts_with("div_"), "{token}");
        token
    }

    /// Places `train.py::main` called `name` as the member whose token is `token`, over TLS,
    /// as their `div run --gpu cpu --name NAME --detach train.py::main` does.
    async fn place_as(&self, token: &str, name: &str) {
        let code = self.server.code(&[("train.py", TRAIN)]).await;
        let entrypoint = div_spec::Entrypoint::parse("train.py::main").expect("an entrypoint");
        let body = json!({
            "project": "team",
            "name": name,
            "entrypoint": entrypoint.typed(),
            "command": entrypoint.command(),
            "sku": "cpu",
            "gpus": 0,
            "code": code,
        })
        .to_string();
        let answer = request(
            self,
            "POST",
            "/v1/runs",
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("Content-Type", "application/json"),
                ("Idempotency-Key", &format!("place-{name}")),
            ],
            &body,
        );
        assert_eq!(status(&answer), 201, "{answer}");
    }

    /// The audit log, as the owner reads it (`div server audit --json`): each entry's member,
    /// action and target.
    async fn audit(&self) -> Vec<(String, String, String)> {
        let (status, list) = self
            .server
            .request("GET", "/v1/audit?limit=1000", None)
            .await;
        assert_eq!(status, 200, "{list}");
        list["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (s("member"), s("action"), s("target"))
            })
            .collect()
    }
}

/// One HTTP/1.1 exchange over TLS with the team's listener, trusting the test CA: the whole
/// answer, head and body, as text.
fn https(team: &Team, request: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(team.ca())
        .expect("the CA")
        .flatten()
    {
        roots.add(cert).expect("the CA is a certificate");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("a connection");
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", team.port)).expect("connect");
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// A request of `method path` with these headers and body, closing the connection after.
fn request(team: &Team, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
        team.port,
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    https(team, &text)
}

/// The status code of an answer.
fn status(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// What `Browser::until` waits for: the runs list, signed in as `who`.
fn signed_in_as(who: &str) -> String {
    format!(
        "return document.getElementById('who') && \
         document.getElementById('who').textContent === '{who}' && \
         document.body.dataset.loaded === 'true'"
    )
}

async fn sign_in(b: &Browser, token: &str) {
    let field = b
        .c()
        .find(Locator::Css("#token"))
        .await
        .expect("the token field");
    field.clear().await.expect("cleared");
    field.send_keys(token).await.expect("typed");
    b.c()
        .find(Locator::Css("#go"))
        .await
        .expect("sign in")
        .click()
        .await
        .expect("click");
}

async fn click(b: &Browser, css: &str) {
    b.c()
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
}

/// Stops the run whose page is open, confirming.
async fn stop_here(b: &Browser) {
    b.until(
        "the Stop button",
        "return !document.getElementById('stop').hidden",
    )
    .await;
    click(b, "#stop").await;
    b.until(
        "the confirmation",
        "return document.getElementById('confirm').open",
    )
    .await;
    click(b, "#confirm-yes").await;
}

#[test]
fn a_member_signs_in_once_stops_by_right_and_signs_out() {
    on_runtime(async {
        let owned = Team::start().await;
        let team = &owned;
        let alice_token = team.add("alice", "member").await;
        let bob_token = team.add("bob", "member").await;
        team.place_as(&alice_token, "alices-run").await;
        team.place_as(&bob_token, "bobs-run").await;
        let base = team.url();
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            // A token in the URL opens nothing: the sign-in page is all there is.
            b.goto(&format!("{base}/?token={bob_token}")).await;
            b.until(
                "the sign-in page",
                "return !!document.getElementById('token')",
            )
            .await;
            assert_eq!(b.c().get_all_cookies().await.expect("cookies").len(), 0);
            b.screenshot("team-sign-in").await;
            sign_in(&b, "div_not_a_token").await;
            b.until(
                "the refusal",
                "return document.getElementById('error').textContent.includes('not a member')",
            )
            .await;
            sign_in(&b, &bob_token).await;
            b.until("the runs, signed in as bob", &signed_in_as("bob · member"))
                .await;
            // The session: HttpOnly (no script sees it), Strict, Secure, and not the token.
            let cookies = b.c().get_all_cookies().await.expect("cookies");
            assert_eq!(cookies.len(), 1, "{cookies:?}");
            let session = &cookies[0];
            assert_eq!(session.name(), "__Host-div_session");
            assert_eq!(session.http_only(), Some(true));
            assert_eq!(session.secure(), Some(true));
            assert_eq!(
                session.same_site().map(|s| format!("{s:?}")).as_deref(),
                Some("Strict")
            );
            assert!(!bob_token.contains(session.value()));
            assert_eq!(b.js("return document.cookie").await, json!(""));
            let cookie = format!("__Host-div_session={}", session.value());
            // Who placed each run, in the list.
            let by = b
                .js(
                    "return [...document.querySelectorAll('#rows tr')].map(r => \
                   [r.cells[0].textContent, r.cells[10].textContent])",
                )
                .await;
            assert!(
                by.as_array()
                    .is_some_and(|rows| rows.contains(&json!(["alices-run", "alice"]))),
                "{by}"
            );
            b.screenshot("team-runs").await;

            // Another member's run: Stop is refused, saying which right it needs.
            b.goto(&format!("{base}/runs/alices-run")).await;
            b.until(
                "alice's run page",
                "return document.getElementById('placed-by').textContent === 'alice'",
            )
            .await;
            stop_here(&b).await;
            b.until(
            "the refusal",
            "return document.getElementById('error').textContent.includes('the right `stop_any_run`')",
        )
        .await;
            // A page of another site cannot stop a run with bob's session: the browser sends it
            // no cookie, and the server wants the dashboard's own `Origin` anyway.
            let forged = request(
                team,
                "POST",
                "/api/runs/bobs-run/stop",
                &[("Cookie", &cookie), ("Origin", "https://evil.example")],
                "",
            );
            assert_eq!(status(&forged), 403, "{forged}");
            let no_origin = request(
                team,
                "POST",
                "/api/runs/bobs-run/stop",
                &[("Cookie", &cookie)],
                "",
            );
            assert_eq!(status(&no_origin), 403, "{no_origin}");
            cross_site_form(&b, team).await;
            // His own: stopped.
            b.goto(&format!("{base}/runs/bobs-run")).await;
            b.until(
                "bob's run page",
                "return document.body.dataset.status === 'running'",
            )
            .await;
            stop_here(&b).await;
            b.until(
                "his run ended",
                "return document.body.dataset.status === 'canceled'",
            )
            .await;

            // Signing out ends the session on the server, not only in this browser.
            click(&b, "#signout").await;
            b.until(
                "the sign-in page again",
                "return !!document.getElementById('token')",
            )
            .await;
            let after = request(team, "GET", "/api/runs", &[("Cookie", &cookie)], "");
            assert_eq!(status(&after), 401, "{after}");
        }
        let (_, runs) = team.server.request("GET", "/v1/runs", None).await;
        let runs: Value = runs["runs"].clone();
        let status_of = |name: &str| {
            runs.as_array()
                .and_then(|a| a.iter().find(|r| r["name"] == name))
                .map(|r| r["status"].clone())
        };
        assert_eq!(status_of("alices-run"), Some(json!("running")), "{runs}");
        assert_eq!(status_of("bobs-run"), Some(json!("canceled")), "{runs}");
        let log = team.audit().await;
        for action in ["session.sign_in", "run.stop", "session.sign_out"] {
            assert!(
                log.iter().any(|(m, a, _)| m == "bob" && a == action),
                "{action}: {log:?}"
            );
        }
    });
}

/// A page of another site (a plain loopback server of the test's) whose form posts to the
/// dashboard's stop: the browser, signed in there, sends no cookie with it (`SameSite=Strict`),
/// and nothing stops.
async fn cross_site_form(b: &Browser, team: &Team) {
    let target = format!("{}/api/runs/alices-run/stop", team.url());
    let page = format!(
        "<!doctype html><form id=f method=POST action='{target}'></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    b.goto(&format!("http://127.0.0.1:{port}/")).await;
    b.until(
        "the form's answer",
        "return location.href.includes('/api/runs/alices-run/stop')",
    )
    .await;
    let shown = b.js("return document.body.innerText").await;
    let shown = shown.as_str().unwrap_or_default().to_owned();
    assert!(
        shown.contains("forbidden") || shown.contains("unauthorized"),
        "refused: {shown}"
    );
    let _ = server.join();
}
