//! `overhead`: `div run --gpu cpu -- true` on a warm server against a bare `bwrap … true`
//! with the same binds, and the phases of a run as seen from outside.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::args::Args;
use crate::bench_local::{Local, quiet, spawn_piped};
use crate::timing::{median, ms, percentile, ratio, verdict};

/// bwrap with the binds the local control plane gives a run: each top-level folder read-only,
/// the top-level links, `/proc`, `/dev`, and writable `/tmp`, `/mnt` and `/workspace`.
fn bare_bwrap(dir: &Path, command: &str) -> Result<Command> {
    let mut cmd = Command::new("bwrap");
    cmd.args([
        "--die-with-parent",
        "--new-session",
        "--unshare-all",
        "--share-net",
    ]);
    let mut entries: Vec<_> = fs::read_dir("/")?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        if ["proc", "dev", "sys", "tmp", "mnt", "workspace"]
            .iter()
            .any(|s| name == *s)
        {
            continue;
        }
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            cmd.arg("--symlink").arg(fs::read_link(&path)?).arg(&path);
        } else if meta.is_dir() || meta.is_file() {
            cmd.arg("--ro-bind").arg(&path).arg(&path);
        }
    }
    cmd.args(["--proc", "/proc", "--dev", "/dev"]);
    for (sub, at) in [("tmp", "/tmp"), ("mnt", "/mnt"), ("ws", "/workspace")] {
        let d = dir.join(sub);
        fs::create_dir_all(&d)?;
        cmd.arg("--bind").arg(&d).arg(at);
    }
    cmd.args(["--chdir", "/workspace", "sh", "-lc", command]);
    Ok(cmd)
}

/// Each line's arrival on stdout and stderr, timed from `started`.
struct Timed {
    lines: Vec<(Duration, bool, String)>,
    first_stdout: Option<Duration>,
    exit: Duration,
}

fn timed(mut cmd: Command) -> Result<Timed> {
    let started = Instant::now();
    let mut child = spawn_piped(&mut cmd)?;
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().context("a piped stdout")?;
    let err = child.stderr.take().context("a piped stderr")?;
    let tx2 = tx.clone();
    let a = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send((started.elapsed(), true, line));
        }
    });
    let b = std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx2.send((started.elapsed(), false, line));
        }
    });
    let status = child.wait()?;
    let exit = started.elapsed();
    let _ = (a.join(), b.join());
    ensure!(status.success(), "{cmd:?} failed: {status}");
    let lines: Vec<_> = rx.try_iter().collect();
    let first_stdout = lines.iter().find(|l| l.1).map(|l| l.0);
    Ok(Timed {
        lines,
        first_stdout,
        exit,
    })
}

pub(crate) fn overhead(div: &Path, args: &Args) -> Result<()> {
    let local = Local::start(div, "")?;
    let bare_dir = tempfile::tempdir()?;
    let (bare, _) = median(args.runs, || {
        quiet(&mut bare_bwrap(bare_dir.path(), "true")?)
    })?;
    let (run, _) = median(args.runs, || {
        quiet(&mut local.cmd(&["run", "--gpu", "cpu", "--", "true"]))
    })?;
    let r = ratio(run, bare);
    println!("run overhead (median of {}):", args.runs);
    println!("  bwrap … true                   {:8.2} ms", ms(bare));
    println!(
        "  div run --gpu cpu -- true      {:8.2} ms  {r:5.1}× bwrap  (goal ≤ 3×: {})",
        ms(run),
        verdict(r <= 3.0)
    );

    // Phases, from the lines `div run` prints as it goes: the shipped line (after checking,
    // listing, hashing and uploading), the run's line (placed), the first byte of its log on
    // stdout (started and streamed), its last line (ended), and the process's exit.
    let names = [
        "validate + list + hash + upload",
        "create",
        "start + first log byte",
        "run to its end + last line",
        "exit",
    ];
    let mut phases: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    // The steps as `div` times them itself (`DIVERGENT_TIMINGS`), by name, in order.
    let mut steps: Vec<(String, Vec<Duration>)> = Vec::new();
    for _ in 0..args.runs {
        let mut cmd = local.cmd(&["run", "--gpu", "cpu", "--", "echo ready"]);
        cmd.env("DIVERGENT_TIMINGS", "1");
        let t = timed(cmd)?;
        let timings = t
            .lines
            .iter()
            .rev()
            .find_map(|l| l.2.strip_prefix("timings: "))
            .context("div run printed no timings line")?;
        for (i, step) in timings.split(" · ").enumerate() {
            let (name, value) = step
                .strip_suffix(" ms")
                .and_then(|s| s.rsplit_once(' '))
                .with_context(|| format!("a step is `name N ms`, not `{step}`"))?;
            let value: f64 = value.parse().with_context(|| format!("`{step}`"))?;
            if steps.len() <= i {
                steps.push((name.to_owned(), Vec::new()));
            }
            ensure!(
                steps[i].0 == name,
                "the steps changed: `{}` then `{name}`",
                steps[i].0
            );
            steps[i].1.push(Duration::from_secs_f64(value / 1000.0));
        }
        let shipped = t
            .lines
            .iter()
            .find(|l| !l.1 && l.2.contains(" → "))
            .map(|l| l.0)
            .context("div run printed no shipped line")?;
        let placed = t
            .lines
            .iter()
            .find(|l| !l.1 && l.2.starts_with("run-"))
            .map(|l| l.0)
            .context("div run printed no run line")?;
        let first = t.first_stdout.context("the run printed nothing")?;
        let ended = t
            .lines
            .iter()
            .rfind(|l| !l.1 && !l.2.starts_with("timings: "))
            .map(|l| l.0)
            .context("div run printed no last line")?;
        let marks = [Duration::ZERO, shipped, placed, first, ended, t.exit];
        for (i, w) in marks.windows(2).enumerate() {
            phases[i].push(w[1].saturating_sub(w[0]));
        }
    }
    println!(
        "  phases of `div run --gpu cpu -- 'echo ready'` (median of {}):",
        args.runs
    );
    for (name, mut times) in names.iter().zip(phases) {
        println!("    {name:<34} {:8.2} ms", ms(percentile(&mut times, 50)));
    }
    println!(
        "  the same runs' steps as div timed them (DIVERGENT_TIMINGS, from the start of main):"
    );
    for (name, mut times) in steps {
        println!("    {name:<34} {:8.2} ms", ms(percentile(&mut times, 50)));
    }
    Ok(())
}
