//! A team's dashboard in the browser (docs/team.md), served over TLS by the team's listener:
//! a member signs in with their token once (never in a URL), the session is an `HttpOnly`,
//! `SameSite=Strict` cookie no script reads, stopping needs the right `div stop` needs, a
//! page of another site cannot stop a run, and signing out ends the session on the server.

use fantoccini::Locator;
use serde_json::json;

use super::{Browser, with_browser};
use crate::team::{Team, request, status};

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
    let owned = Team::start();
    let team = &owned;
    let alice = team.member("alice", &team.add("alice", "member"));
    let bob_token = team.add("bob", "member");
    let bob = team.member("bob", &bob_token);
    alice.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "alices-run",
        "--detach",
        "train.py::main",
    ]);
    bob.ok(&[
        "run",
        "--gpu",
        "cpu",
        "--name",
        "bobs-run",
        "--detach",
        "train.py::main",
    ]);
    let base = team.url();
    with_browser(|b| async move {
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
    });
    let runs = alice.ok(&["runs", "--all", "--json"]);
    let runs: serde_json::Value = serde_json::from_str(&runs).expect("json");
    let status_of = |name: &str| {
        runs.as_array()
            .and_then(|a| a.iter().find(|r| r["name"] == name))
            .map(|r| r["status"].clone())
    };
    assert_eq!(status_of("alices-run"), Some(json!("running")), "{runs}");
    assert_eq!(status_of("bobs-run"), Some(json!("canceled")), "{runs}");
    let log = crate::team::audit(team);
    for action in ["session.sign_in", "run.stop", "session.sign_out"] {
        assert!(
            log.iter().any(|(m, a, _)| m == "bob" && a == action),
            "{action}: {log:?}"
        );
    }
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
