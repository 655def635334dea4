//! What a run or a stranger cannot make the dashboard do: markup stays text, no secret is
//! shown, a wrong token is refused, stop needs the dashboard's own origin.

use div_test_support::dashboard::{Browser, Locator, on_runtime, origin, raw, session_cookie};
use serde_json::{Value, json};

use super::vision;

#[test]
fn markup_from_a_run_is_inert_text_and_no_secret_is_shown() {
    on_runtime(async {
        let local = vision().await;
        let secret = "s3cr3t-value-that-must-not-show";
        let (status, set) = local
            .server
            .request("PUT", "/v1/secrets/API_KEY", Some(json!({"value": secret})))
            .await;
        assert!(matches!(status, 200 | 201), "{status} {set}");
        local
            .place_and_wait(
                &["python3", "evil.py", "<script>window.__pwned=4</script>"],
                json!({"name": "inert", "checks": ["metrics.accuracy >= 0.8"]}),
            )
            .await;
        let url = local.dashboard().await;
        let Some(b) = Browser::start().await else {
            return;
        };
        {
            b.goto(&url).await;
            b.until(
                "the run in the list",
                "return document.querySelectorAll('#rows tr').length === 1",
            )
            .await;
            b.goto(&format!("{}/runs/inert", origin(&url))).await;
            b.until(
                "the result",
                "return document.getElementById('result').textContent.includes('html')",
            )
            .await;
            b.c()
                .find(Locator::Css("[data-tab=log]"))
                .await
                .expect("tab")
                .click()
                .await
                .expect("click");
            b.until(
                "the log",
                "return document.getElementById('logview').textContent.includes('not bold')",
            )
            .await;
            // Nothing ran: no flag set, no image made, only the page's own scripts.
            assert_eq!(
                b.js("return window.__pwned === undefined").await,
                Value::Bool(true)
            );
            assert_eq!(
                b.js("return document.querySelectorAll('img, b').length")
                    .await,
                json!(0)
            );
            let scripts = b
            .js("return [...document.querySelectorAll('script')].map(s => s.getAttribute('src'))")
            .await;
            assert_eq!(
                scripts,
                json!([
                    "/assets/common.js",
                    "/assets/uPlot.iife.min.js",
                    "/assets/run.js"
                ])
            );
            // The markup is there, as text.
            let typed = b
                .js("return document.getElementById('typed').textContent")
                .await;
            assert!(
                typed
                    .as_str()
                    .is_some_and(|t| t.contains("<script>window.__pwned=4</script>")),
                "{typed}"
            );
            let log = b
                .js("return document.getElementById('logview').textContent")
                .await;
            assert!(
                log.as_str()
                    .is_some_and(|l| l.contains("<img src=x onerror=")),
                "{log}"
            );
            let result = b
                .js("return document.getElementById('result').textContent")
                .await;
            assert!(
                result
                    .as_str()
                    .is_some_and(|r| r.contains("<script>window.__pwned = 3</script>")),
                "{result}"
            );
            b.screenshot("inert").await;
            // No page or answer behind one holds the secret's value.
            for path in [
                "/",
                "/runs/inert",
                "/api/runs",
                "/api/runs/inert",
                "/api/runs/inert/charts",
            ] {
                let body = b
                    .js(&format!("return fetch('{path}').then(r => r.text())"))
                    .await;
                assert!(
                    !body.as_str().unwrap_or_default().contains(secret),
                    "{path} shows the secret"
                );
            }
        }
    });
}

#[test]
fn a_wrong_token_is_refused_and_stop_needs_the_dashboards_own_origin() {
    on_runtime(async {
        let local = vision().await;
        let guarded = local
            .place(
                &["ticker.py::main"],
                json!({"max_spend_cents": 100, "name": "guarded"}),
            )
            .await;
        local
            .server
            .wait_running(guarded["id"].as_str().expect("an id"))
            .await;
        let url = local.dashboard().await;
        let base = origin(&url);
        let used = url.clone();
        if let Some(b) = Browser::start().await {
            // A wrong token: refused, and no cookie comes of it.
            b.goto(&format!("{base}/?token={}", "0".repeat(64))).await;
            b.until(
                "the refusal",
                "return document.querySelector('h1').textContent.includes('not valid')",
            )
            .await;
            let api = b.js("return fetch('/api/runs').then(r => r.status)").await;
            assert_eq!(api, json!(401));
            b.goto(&format!("{base}/runs/guarded")).await;
            b.until(
                "the refusal",
                "return document.querySelector('h1').textContent.includes('not valid')",
            )
            .await;
            b.screenshot("refused").await;
            // The right one works.
            b.goto(&url).await;
            b.until(
                "the list",
                "return document.querySelectorAll('#rows tr').length === 1",
            )
            .await;
        }

        // Outside a browser: a request that carries the cookie but comes from another origin (a
        // page elsewhere posting a form), or names another host (DNS rebinding), changes nothing.
        let port = base.rsplit(':').next().expect("a port").to_owned();
        // A link opens the dashboard once: used (by the browser, or here when there is none),
        // it opens nothing again.
        let token = used.split("token=").nth(1).expect("a token");
        let _first_use = raw(
            &port,
            &format!(
                "GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            ),
        );
        let again = raw(
            &port,
            &format!(
                "GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(again.starts_with("HTTP/1.1 401"), "{again}");
        let cookie = session_cookie(&port, &local.dashboard().await);
        let cross_site = raw(
            &port,
            &format!(
                "POST /api/runs/guarded/stop HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\
             Origin: http://evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(cross_site.starts_with("HTTP/1.1 403"), "{cross_site}");
        let no_origin = raw(
            &port,
            &format!(
                "POST /api/runs/guarded/stop HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(no_origin.starts_with("HTTP/1.1 403"), "{no_origin}");
        let rebound = raw(
            &port,
            &format!(
                "GET /api/runs HTTP/1.1\r\nHost: evil.example:{port}\r\nCookie: {cookie}\r\n\
             Connection: close\r\n\r\n"
            ),
        );
        assert!(rebound.starts_with("HTTP/1.1 421"), "{rebound}");
        let runs: Value = local.runs().await;
        assert_eq!(runs[0]["status"], json!("running"), "{runs}");
        // The same request from the dashboard's own origin stops it.
        let own = raw(
            &port,
            &format!(
                "POST /api/runs/guarded/stop HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n\
             Origin: http://127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        );
        assert!(own.starts_with("HTTP/1.1 200"), "{own}");
        let runs: Value = local.runs().await;
        assert_ne!(runs[0]["status"], json!("running"), "{runs}");
    });
}
