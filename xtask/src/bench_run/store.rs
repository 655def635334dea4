//! `store`: `div runs` with N runs stored (inserted straight into the server's SQLite with
//! the `sqlite3` command), and N runs placed at once on emulated GPUs.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::args::Args;
use crate::bench_local::Local;
use crate::timing::{median, ms, verdict};

fn sqlite(db: &Path, sql: &str) -> Result<String> {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .context("running sqlite3 (apt-get install sqlite3)")?;
    ensure!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn store(div: &Path, args: &Args) -> Result<()> {
    let runs = args.runs(15);
    // N stored runs: one real run, copied N times straight into the store while the server
    // is stopped, then the server started again.
    let local = Local::start(div, "h100:8")?;
    local.ok(&["run", "--gpu", "cpu", "--", "true"])?;
    local.ok(&["server", "stop"])?;
    let db = local.home.join("state.db");
    let started = Instant::now();
    sqlite(
        &db,
        &format!(
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n}) \
             INSERT INTO runs (id, name, project, status, run, internal) \
             SELECT 'bulk-' || i, 'bulk-' || i, r.project, r.status, \
             json_set(r.run, '$.id', 'bulk-' || i, '$.name', 'bulk-' || i), r.internal \
             FROM c, (SELECT * FROM runs LIMIT 1) AS r;",
            n = args.stored
        ),
    )?;
    eprintln!("stored {} runs in {:.1?}", args.stored, started.elapsed());
    local.ok(&["server", "start"])?;
    let (list, out) = median(runs, || local.ok(&["runs"]))?;
    ensure!(
        String::from_utf8_lossy(&out).contains("bulk-"),
        "div runs did not list the stored runs"
    );
    let (all, _) = median(runs, || local.ok(&["runs", "--all"]))?;
    println!(
        "store scale ({} runs stored, median of {}):",
        args.stored, runs
    );
    println!(
        "  div runs                {:8.2} ms  (goal ≤ 50 ms: {})",
        ms(list),
        verdict(list <= Duration::from_millis(50))
    );
    println!("  div runs --all          {:8.2} ms", ms(all));
    drop(local);
    burst(div, args)
}

/// `burst` runs placed at once on 8 emulated H100s, each holding one GPU for 0.3 s: all are
/// placed, all succeed, and never more than 8 run at once.
fn burst(div: &Path, args: &Args) -> Result<()> {
    let local = Local::start(div, "h100:8")?;
    let started = Instant::now();
    let children: Vec<_> = (0..args.burst)
        .map(|_| {
            local
                .cmd(&[
                    "run",
                    "--detach",
                    "--gpu",
                    "h100",
                    "--",
                    "date +%s%N; sleep 0.3; date +%s%N",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut names = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        ensure!(
            out.status.success(),
            "div run --detach failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        names.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    }
    let placed = started.elapsed();
    // Wait for every run to end (a deadline of a minute past what 8 at a time would take).
    let deadline = Instant::now() + Duration::from_secs(60 + args.burst as u64);
    let runs = loop {
        let json = local.ok(&["runs", "--limit", &args.burst.to_string(), "--json"])?;
        let value: serde_json::Value = serde_json::from_slice(&json).context("div runs --json")?;
        let runs = value
            .get("runs")
            .or(Some(&value))
            .and_then(|v| v.as_array())
            .cloned()
            .context("div runs --json gave no list")?;
        let going = runs
            .iter()
            .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
            .count();
        if going == 0 {
            break runs;
        }
        ensure!(Instant::now() < deadline, "{going} runs never ended");
        std::thread::sleep(Duration::from_millis(200));
    };
    let ended = started.elapsed();
    let succeeded = runs
        .iter()
        .filter(|r| r["status"].as_str() == Some("succeeded"))
        .count();
    let mut intervals = Vec::new();
    for name in &names {
        let log = local.ok(&["logs", name])?;
        let stamps: Vec<u128> = String::from_utf8_lossy(&log)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        ensure!(stamps.len() == 2, "run `{name}` logged {stamps:?}");
        intervals.push((stamps[0], stamps[1]));
    }
    // The most runs alive at one moment, from their own clocks.
    let mut events: Vec<(u128, i32)> = intervals
        .iter()
        .flat_map(|&(a, b)| [(a, 1), (b, -1)])
        .collect();
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    let ok = names.len() == args.burst && succeeded == args.burst && most <= 8;
    println!(
        "burst ({} runs at once on 8 emulated H100s, 0.3 s each):",
        args.burst
    );
    println!(
        "  placed {} in {:.1} s, all ended in {:.1} s; succeeded {}, lost {}, most at once {most} (≤ 8)  ({})",
        names.len(),
        placed.as_secs_f64(),
        ended.as_secs_f64(),
        succeeded,
        args.burst - succeeded.min(args.burst),
        verdict(ok)
    );
    Ok(())
}
