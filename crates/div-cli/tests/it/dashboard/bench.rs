//! The list with many runs stored, timed (ignored: `cargo test -p div-cli --test it
//! dashboard::bench -- --ignored --nocapture`).

use std::process::Command;
use std::time::Duration;

use div_test_support::dashboard::{Locator, origin, raw, session_cookie, with_browser};
use div_test_support::wait_until_async;
use serde_json::json;

use super::vision;

/// `cargo xtask bench dashboard`: with `DIV_BENCH_STORED` runs stored (100,000 unless told),
/// how long the list's first page takes to answer, and how long the page takes to be
/// interactive and to show its first rows in headless Chromium. Prints the medians against
/// the goals (≤ 50 ms, ≤ 1 s); a benchmark, so it asserts only that the page worked.
#[test]
#[ignore = "a benchmark: cargo xtask bench dashboard"]
fn bench_the_list_with_many_runs_stored() {
    let stored: u64 = std::env::var("DIV_BENCH_STORED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let local = vision();
    local.ok(&["run", "--gpu", "cpu", "--no-upload", "--", "sleep", "0"]);
    local.ok(&["server", "stop"]);
    // One real run, copied straight into the store while the server is stopped.
    let db = local.tmp.path().join("div-home/state.db");
    let sql = format!(
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {stored}) \
         INSERT INTO runs (id, name, project, status, run, internal) \
         SELECT 'bulk-' || i, 'bulk-' || i, r.project, r.status, \
         json_set(r.run, '$.id', 'bulk-' || i, '$.name', 'bulk-' || i), r.internal \
         FROM c, (SELECT * FROM runs LIMIT 1) AS r;"
    );
    let out = Command::new("sqlite3")
        .arg(&db)
        .arg(&sql)
        .output()
        .expect("sqlite3 (apt-get install sqlite3)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = local.dashboard();
    let base = origin(&url);
    let port = base.rsplit(':').next().expect("a port").to_owned();
    let cookie = session_cookie(&port, &local.dashboard());

    let mut api = Vec::new();
    for _ in 0..15 {
        let started = std::time::Instant::now();
        let answer = raw(
            &port,
            &format!(
                "GET /api/runs?limit=50 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                 Cookie: {cookie}\r\nConnection: close\r\n\r\n"
            ),
        );
        api.push(started.elapsed());
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("bulk-"),
            "{answer}"
        );
    }
    api.sort();
    let api_median = api[api.len() / 2];

    with_browser(|b| async move {
        b.goto(&url).await;
        let mut interactive = Vec::new();
        let mut rows = Vec::new();
        for _ in 0..5 {
            b.goto(&format!("{base}/")).await;
            b.until(
                "a full first page",
                "return document.querySelectorAll('#rows tr').length === 50",
            )
            .await;
            let t = b
                .js(
                    "return [performance.getEntriesByType('navigation')[0].domInteractive, \
                     Number(document.body.dataset.firstRowsMs)]",
                )
                .await;
            interactive.push(t[0].as_f64().unwrap_or(f64::NAN));
            rows.push(t[1].as_f64().unwrap_or(f64::NAN));
        }
        interactive.sort_by(f64::total_cmp);
        rows.sort_by(f64::total_cmp);
        let (i, r) = (interactive[2], rows[2]);
        let api_ms = api_median.as_secs_f64() * 1000.0;
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        #[allow(clippy::print_stdout)]
        {
            println!("dashboard with {stored} runs stored (medians):");
            println!(
                "  first page, GET /api/runs?limit=50  {api_ms:8.2} ms  (goal <= 50 ms: {})",
                verdict(api_ms <= 50.0)
            );
            println!(
                "  page interactive (domInteractive)   {i:8.2} ms  (goal <= 1000 ms: {})",
                verdict(i <= 1000.0)
            );
            println!(
                "  first rows on the page              {r:8.2} ms  (goal <= 1000 ms: {})",
                verdict(r <= 1000.0)
            );
        }

        // A log of DIV_BENCH_LOG_MIB MiB (1 GiB unless told): the page shows its tail, and
        // how long that and one "Load earlier" take.
        let mib: u64 = std::env::var("DIV_BENCH_LOG_MIB")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1024);
        std::fs::write(local.tmp.path().join("vision/huge.py"), HUGE).expect("write");
        let env = format!("DIV_BENCH_LOG_MIB={mib}");
        local.ok(&[
            "run",
            "--detach",
            "--gpu",
            "cpu",
            "--name",
            "huge",
            "--max-spend",
            "5",
            "--env",
            &env,
            "huge.py::main",
        ]);
        b.goto(&format!("{base}/runs/huge")).await;
        let ended = format!("the {mib} MiB run's end on its page");
        wait_until_async(ended, Duration::from_secs(1800), || async {
            match b.js("return document.body.dataset.status").await {
                status if status == json!("succeeded") => Ok(()),
                status => Err(status),
            }
        })
        .await;
        let mut tails = Vec::new();
        let mut earlier = Vec::new();
        let mut held = 0;
        for _ in 0..3 {
            // A fresh page each time (a change of the fragment alone loads nothing).
            b.goto(&format!("{base}/")).await;
            b.goto(&format!("{base}/runs/huge#log")).await;
            b.until(
                "the huge log's tail",
                "return document.getElementById('logview').textContent.endsWith('the end\\n')",
            )
            .await;
            let t = b
                .js("const v = document.getElementById('logview');\
                     return [Number(v.dataset.tailMs), v.textContent.length, Number(v.dataset.end)]")
                .await;
            tails.push(t[0].as_f64().unwrap_or(f64::NAN));
            held = t[1].as_u64().unwrap_or(0);
            assert_eq!(t[2].as_u64(), Some(mib * ((1 << 20) + 9) + 8), "{t}");
            let clicked = std::time::Instant::now();
            b.c()
                .find(Locator::Css("#earlier"))
                .await
                .expect("earlier")
                .click()
                .await
                .expect("click");
            b.until(
                "the earlier part",
                "const v = document.getElementById('logview');\
                 return Number(v.dataset.end) - Number(v.dataset.start) > 300000",
            )
            .await;
            earlier.push(clicked.elapsed().as_secs_f64() * 1000.0);
        }
        tails.sort_by(f64::total_cmp);
        earlier.sort_by(f64::total_cmp);
        #[allow(clippy::print_stdout)]
        {
            println!("a {mib} MiB log (medians of 3):");
            println!(
                "  its tail on the page                {:8.2} ms  ({held} characters held)",
                tails[1]
            );
            println!(
                "  Load earlier, clicked to shown      {:8.2} ms  (polled every 200 ms)",
                earlier[1]
            );
        }
    });
}

/// `DIV_BENCH_LOG_MIB` MiB of 64-byte lines, each MiB after a `mib N` line, then `the end`.
const HUGE: &str = r#"import os, sys

def main():
    mib = int(os.environ.get("DIV_BENCH_LOG_MIB", "1024"))
    block = "".join(f"line {j:05d} " + "x" * 52 + "\n" for j in range(16384)).encode()
    out = sys.stdout.buffer
    for i in range(mib):
        out.write(f"mib {i:04d}\n".encode())
        out.write(block)
    out.write(b"the end\n")
    out.flush()
"#;
