//! The benchmarks of the `div` binary against what a user would otherwise run, each on a
//! local control plane in a temp `DIVERGENT_HOME` that it stops at the end:
//!
//! - `overhead`: `div run --gpu cpu -- true` on a warm server vs a bare `bwrap … true` with
//!   the same binds, and the phases of a run as seen from outside;
//! - `logs`: a run writing N MiB to stdout with `div run` into a pipe vs `cat` of the same
//!   bytes; the time from a line written to the line printed (p50/p99);
//! - `startup`: `div --version` and `div run --help` vs `git --version`;
//! - `store`: `div runs` with N runs stored (inserted straight into the server's SQLite with
//!   the `sqlite3` command), and N runs placed at once on emulated GPUs;
//! - `disk`: bytes on disk after N runs of a project with one file that changes each run (the
//!   code volume and its blobs, each inode once, as `du` counts), against the project's own
//!   bytes and against a copy of it per run.
//!
//! Flags: `--div PATH` (default: build `div` in release), `--runs N`, `--log-mib N`
//! (default 256; the issue's figure is `--log-mib 1024`), `--stored N` (default 100000),
//! `--burst N` (default 200).

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};

use crate::timing::{median, ms, percentile, ratio, verdict};

pub(crate) struct Args {
    div: Option<PathBuf>,
    runs: usize,
    log_mib: u64,
    stored: u64,
    burst: usize,
}

pub(crate) fn parse(rest: &[String]) -> Result<Args> {
    let mut args = Args {
        div: None,
        runs: 15,
        log_mib: 256,
        stored: 100_000,
        burst: 200,
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--div" => args.div = Some(PathBuf::from(value()?)),
            "--runs" => args.runs = value()?.parse().context("--runs is a count")?,
            "--log-mib" => args.log_mib = value()?.parse().context("--log-mib is a count")?,
            "--stored" => args.stored = value()?.parse().context("--stored is a count")?,
            "--burst" => args.burst = value()?.parse().context("--burst is a count")?,
            other => bail!(
                "unknown flag `{other}`; expected --div, --runs, --log-mib, --stored or --burst"
            ),
        }
    }
    ensure!(args.runs > 0, "--runs must be at least 1");
    Ok(args)
}

/// The `div` binary: the one given, or a release build of this tree.
pub(crate) fn div_binary(div: Option<&Path>) -> Result<PathBuf> {
    if let Some(div) = div {
        return div
            .canonicalize()
            .with_context(|| format!("`{}`", div.display()));
    }
    crate::run(crate::cargo().args(["build", "--release", "--quiet", "-p", "div-cli"]))?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    let div = target.join("release/div");
    ensure!(div.exists(), "no `div` at `{}`", div.display());
    Ok(div)
}

/// A local control plane on a temp home, with a project folder beside it (holding a
/// `train.py`), stopped when dropped.
pub(crate) struct Local {
    div: PathBuf,
    home: PathBuf,
    pub(crate) project: PathBuf,
    gpus: String,
    _tmp: tempfile::TempDir,
}

impl Local {
    /// Starts one with `gpus` emulated (`""`: none).
    pub(crate) fn start(div: &Path, gpus: &str) -> Result<Local> {
        let tmp = tempfile::tempdir().context("creating a temporary folder")?;
        let project = tmp.path().join("bench");
        fs::create_dir_all(&project)?;
        fs::write(project.join("train.py"), "print('hi')\n")?;
        let local = Local {
            div: div.to_path_buf(),
            home: tmp.path().join("home"),
            project,
            gpus: gpus.to_owned(),
            _tmp: tmp,
        };
        local.ok(&["server", "start"])?;
        Ok(local)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.div);
        cmd.args(args)
            .current_dir(&self.project)
            .env("DIVERGENT_HOME", &self.home)
            .env_remove("DIVERGENT_API_URL")
            .env_remove("DIVERGENT_TOKEN")
            .env("NO_COLOR", "1");
        if self.gpus.is_empty() {
            cmd.env_remove("DIVERGENT_EMULATE_GPUS");
        } else {
            cmd.env("DIVERGENT_EMULATE_GPUS", &self.gpus);
        }
        cmd
    }

    /// Runs `div args…`, quietly; fails unless it exits 0. Returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> Result<Vec<u8>> {
        let out = self
            .cmd(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running div {args:?}"))?;
        ensure!(
            out.status.success(),
            "div {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        stop_runs(|args| self.cmd(args));
        let _ = self.cmd(&["server", "stop"]).output();
    }
}

/// Stops every run of a local control plane that is queued or running (`div runs --all
/// --json`, then `div stop` each, all at once, for a minute at most), as a test's harness does
/// when it ends: a benchmark that failed half way leaves no run going in a home about to be
/// removed. `div` gives the command `div` is run with (its home and environment).
pub(crate) fn stop_runs(div: impl Fn(&[&str]) -> Command) {
    let listed = div(&["runs", "--all", "--limit", "1000", "--json"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let runs: Vec<serde_json::Value> = listed
        .ok()
        .and_then(|out| serde_json::from_slice(&out.stdout).ok())
        .unwrap_or_default();
    let mut stops: Vec<std::process::Child> = runs
        .iter()
        .filter(|r| matches!(r["status"].as_str(), Some("queued" | "running")))
        .filter_map(|r| r["id"].as_str())
        .filter_map(|id| {
            div(&["stop", id])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stops.is_empty() && Instant::now() < deadline {
        stops.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(50));
    }
    for mut stop in stops {
        let _ = stop.kill();
        let _ = stop.wait();
    }
}

pub(crate) fn run(name: &str, rest: &[String]) -> Result<()> {
    let args = parse(rest)?;
    let div = div_binary(args.div.as_deref())?;
    eprintln!("div: {}", div.display());
    match name {
        "overhead" => overhead(&div, &args),
        "logs" => logs(&div, &args),
        "startup" => startup(&div, &args),
        "store" => store(&div, &args),
        "disk" => disk(&div, &args),
        "all" => {
            startup(&div, &args)?;
            overhead(&div, &args)?;
            logs(&div, &args)?;
            store(&div, &args)?;
            disk(&div, &args)
        }
        other => bail!("unknown benchmark `{other}`"),
    }
}

fn quiet(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("starting {cmd:?}"))?;
    ensure!(status.success(), "{cmd:?} failed: {status}");
    Ok(())
}

fn startup(div: &Path, args: &Args) -> Result<()> {
    let runs = args.runs.max(21);
    let (git, _) = median(runs, || quiet(Command::new("git").arg("--version")))?;
    let (version, _) = median(runs, || quiet(Command::new(div).arg("--version")))?;
    let (help, _) = median(runs, || quiet(Command::new(div).args(["run", "--help"])))?;
    println!("startup (median of {runs}):");
    println!("  git --version      {:8.2} ms", ms(git));
    for (what, t) in [("div --version", version), ("div run --help", help)] {
        let r = ratio(t, git);
        println!(
            "  {what:<18} {:8.2} ms  {r:5.2}× git  (goal ≤ 2×: {})",
            ms(t),
            verdict(r <= 2.0)
        );
    }
    Ok(())
}

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

/// Starts `cmd` with no stdin and its stdout and stderr piped.
fn spawn_piped(cmd: &mut Command) -> Result<std::process::Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))
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

fn overhead(div: &Path, args: &Args) -> Result<()> {
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

/// Reads `reader` to its end, counting bytes.
/// The bytes of a run's log that are the run's own: the lines the control plane writes at its
/// top (`div: no image pulled: …`, `div: emulated …`: each begins `div: `) are not counted, so
/// a log of N bytes from the producer counts N whatever the control plane says first.
fn drain_own(mut reader: impl Read) -> Result<u64> {
    const MARK: &[u8] = b"div: ";
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    // The log's start while it may still be the control plane's lines.
    let mut head: Vec<u8> = Vec::new();
    let mut in_head = true;
    loop {
        let k = reader.read(&mut buf)?;
        if k == 0 {
            return Ok(n + head.len() as u64);
        }
        if !in_head {
            n += k as u64;
            continue;
        }
        head.extend_from_slice(&buf[..k]);
        loop {
            if head.len() < MARK.len() && MARK.starts_with(&head) {
                break; // too short to tell yet
            }
            if !head.starts_with(MARK) {
                in_head = false;
                n += head.len() as u64;
                head.clear();
                break;
            }
            match head.iter().position(|b| *b == b'\n') {
                Some(end) => drop(head.drain(..=end)),
                None => break, // the line goes on in the next read
            }
        }
    }
}

/// The run's producer for the throughput bench: 62-byte lines of text written 1 MiB at a
/// time, so that producing the bytes costs what copying them costs (a `yes | head -c`
/// pipeline is itself slower than `cat`, and would be what the bench measures).
const PRODUCER: &str = r#"import sys
line = b"the quick brown fox jumps over the lazy dog, step 0123456789\n"
n = int(sys.argv[1])
block = (line * ((1 << 20) // len(line) + 1))[: 1 << 20]
out = sys.stdout.buffer
for _ in range(n >> 20):
    out.write(block)
out.write(block[: n & ((1 << 20) - 1)])
out.flush()
"#;

/// Runs `cmd` with its stdout drained from a pipe; the time and the bytes of the run's own
/// that it printed ([`drain_own`]).
fn time_into_pipe(cmd: &mut Command) -> Result<(Duration, u64, String)> {
    let started = Instant::now();
    let mut child = spawn_piped(cmd)?;
    let mut stderr = child.stderr.take().context("a piped stderr")?;
    let err = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let got = drain_own(child.stdout.take().context("a piped stdout")?)?;
    let status = child.wait()?;
    let elapsed = started.elapsed();
    let err = err.join().unwrap_or_default();
    ensure!(status.success(), "{cmd:?} failed ({status}): {err}");
    Ok((elapsed, got, err))
}

fn logs(div: &Path, args: &Args) -> Result<()> {
    let local = Local::start(div, "")?;
    let bytes = args.log_mib << 20;
    fs::write(local.project.join("produce.py"), PRODUCER)?;
    let size = bytes.to_string();
    let runs = args.runs.clamp(1, 5);

    // The producer alone, writing into a file: the floor under any `div run`.
    let scratch = local.project.join("produced");
    let (produce, ()) = median(runs, || {
        let out = fs::File::create(&scratch)?;
        let status = Command::new("python3")
            .arg(local.project.join("produce.py"))
            .arg(&size)
            .stdout(out)
            .status()
            .context("starting python3")?;
        ensure!(status.success(), "the producer failed: {status}");
        Ok(())
    })?;
    let _ = fs::remove_file(&scratch);

    // Interleaved: `div run` of the producer into a pipe, `cat` of the log it left into a
    // pipe, and `div logs` of the finished run into a pipe (the stream alone).
    let (mut div_times, mut cat_times, mut logs_times) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=runs {
        let (t, got, err) = time_into_pipe(&mut local.cmd(&[
            "run",
            "--gpu",
            "cpu",
            "--",
            "python3",
            "produce.py",
            &size,
        ]))?;
        ensure!(got == bytes, "div run printed {got} bytes, not {bytes}");
        let name = err
            .lines()
            .find_map(|l| l.strip_prefix("run-").map(|r| r.split_whitespace().next()))
            .flatten()
            .map(|r| format!("run-{r}"))
            .context("div run named no run")?;
        let path = local_log(&local, &name)?;
        let (c, got, _) = time_into_pipe(Command::new("cat").arg(&path))?;
        ensure!(got == bytes, "cat printed {got} bytes, not {bytes}");
        let (l, got, _) = time_into_pipe(&mut local.cmd(&["logs", &name]))?;
        ensure!(got == bytes, "div logs printed {got} bytes, not {bytes}");
        let _ = fs::remove_file(&path);
        // The first round warms up.
        if i > 0 {
            div_times.push(t);
            cat_times.push(c);
            logs_times.push(l);
        }
    }
    let cat = percentile(&mut cat_times, 50);
    let div_time = percentile(&mut div_times, 50);
    let logs_time = percentile(&mut logs_times, 50);
    let mib = args.log_mib as f64;
    let line = |what: &str, t: Duration| {
        println!(
            "  {what:<32} {:8.0} ms  {:7.0} MiB/s  {:5.2}× cat",
            ms(t),
            mib / t.as_secs_f64(),
            ratio(cat, t)
        );
    };
    println!("log throughput ({} MiB, median of {runs}):", args.log_mib);
    line("cat of the log into a pipe", cat);
    line("the producer alone, into a file", produce);
    line("div logs of the run into a pipe", logs_time);
    line("div run into a pipe", div_time);
    println!(
        "  div run: {:.2}× cat  (goal ≥ 0.5×: {})",
        ratio(cat, div_time),
        verdict(ratio(cat, div_time) >= 0.5)
    );

    // Latency: the run prints the wall clock every 20 ms; each line's age when it is read.
    let lines = 250;
    let command =
        format!("i=0; while [ $i -lt {lines} ]; do date +%s%N; sleep 0.02; i=$((i+1)); done");
    let mut child = local
        .cmd(&["run", "--gpu", "cpu", "--", &command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut ages = Vec::new();
    for line in BufReader::new(child.stdout.take().context("a piped stdout")?).lines() {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        if let Ok(at) = line?.trim().parse::<u128>() {
            let age = now.saturating_sub(at);
            ages.push(Duration::from_nanos(u64::try_from(age).unwrap_or(u64::MAX)));
        }
    }
    ensure!(child.wait()?.success(), "the latency run failed");
    ensure!(
        ages.len() == lines,
        "{} lines of {lines} arrived",
        ages.len()
    );
    let p50 = percentile(&mut ages, 50);
    let p99 = percentile(&mut ages, 99);
    println!(
        "  line latency ({lines} lines)  p50 {:.1} ms  p99 {:.1} ms  (goal p99 ≤ 50 ms: {})",
        ms(p50),
        ms(p99),
        verdict(p99 <= Duration::from_millis(50))
    );
    Ok(())
}

/// The log file of the run called `name` under the server's home, its id asked of `div runs
/// --json` (no `sqlite3` needed).
fn local_log(local: &Local, name: &str) -> Result<PathBuf> {
    let listed = local.ok(&["runs", "--json", "--limit", "1000"])?;
    let runs: Vec<serde_json::Value> =
        serde_json::from_slice(&listed).context("div runs --json printed JSON")?;
    let id = runs
        .iter()
        .find(|r| r["name"] == name)
        .and_then(|r| r["id"].as_str())
        .with_context(|| format!("div runs does not list `{name}`"))?;
    let path = local.home.join("runs").join(id).join("log");
    ensure!(path.exists(), "no log at `{}`", path.display());
    Ok(path)
}

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

fn store(div: &Path, args: &Args) -> Result<()> {
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
    let (list, out) = median(args.runs, || local.ok(&["runs"]))?;
    ensure!(
        String::from_utf8_lossy(&out).contains("bulk-"),
        "div runs did not list the stored runs"
    );
    let (all, _) = median(args.runs, || local.ok(&["runs", "--all"]))?;
    println!(
        "store scale ({} runs stored, median of {}):",
        args.stored, args.runs
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

/// `runs` runs of a 20 MiB project (1,000 files of 4 KiB and a 16 MiB `weights.bin`) whose
/// `train.py` changes before each: what its code volume and blobs take on disk afterwards,
/// with the server's retention (`keep_code_snapshots`, 10 by default).
fn disk(div: &Path, args: &Args) -> Result<()> {
    let local = Local::start(div, "")?;
    let data = local.project.join("data");
    fs::create_dir_all(&data)?;
    for i in 0..1000u32 {
        let mut bytes = vec![0u8; 4096];
        bytes[..4].copy_from_slice(&i.to_le_bytes());
        fs::write(data.join(format!("{i:04}.bin")), bytes)?;
    }
    fs::write(local.project.join("weights.bin"), vec![7u8; 16 << 20])?;
    let project_bytes = du(&[&local.project])?;
    let volume = local.home.join("volumes/bench-code");
    let blobs = local.home.join("blobs/bench-code");
    let started = Instant::now();
    for i in 0..args.runs {
        fs::write(
            local.project.join("train.py"),
            format!("print('run {i}')\n"),
        )?;
        local.ok(&["run", "--gpu", "cpu", "--", "true"])?;
    }
    let took = started.elapsed();
    // The last commit's retention pass runs after its answer: wait until the count settles.
    let snapshots = || fs::read_dir(volume.join("code")).map_or(0, |d| d.count());
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = (snapshots(), du(&[&volume, &blobs])?);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = (snapshots(), du(&[&volume, &blobs])?);
        if now == last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let (kept, on_disk) = last;
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    println!(
        "disk ({} runs of a {:.1} MiB project, train.py changed before each, in {:.1?}):",
        args.runs,
        mib(project_bytes),
        took
    );
    println!(
        "  code volume and blobs   {:8.1} MiB  ({:.2}× the project; {} snapshots kept)",
        mib(on_disk),
        on_disk as f64 / project_bytes as f64,
        kept
    );
    println!(
        "  a copy per run          {:8.1} MiB  ({} × the project)",
        mib(project_bytes * args.runs as u64),
        args.runs
    );
    Ok(())
}

/// Bytes `dirs` take on disk together, each inode counted once (`du`'s count): blocks,
/// folders included.
pub(crate) fn du(dirs: &[&Path]) -> Result<u64> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt as _;
    fn walk(p: &Path, seen: &mut HashSet<(u64, u64)>, total: &mut u64) -> std::io::Result<()> {
        let m = fs::symlink_metadata(p)?;
        if seen.insert((m.dev(), m.ino())) {
            *total += m.blocks() * 512;
        }
        if m.is_dir() {
            for entry in fs::read_dir(p)? {
                walk(&entry?.path(), seen, total)?;
            }
        }
        Ok(())
    }
    let (mut seen, mut total) = (HashSet::new(), 0);
    for dir in dirs {
        match walk(dir, &mut seen, &mut total) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.with_context(|| format!("measuring `{}`", dir.display()))?,
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::drain_own;

    /// A reader that hands out `text` in pieces of `size` bytes.
    struct Pieces<'a>(&'a [u8], usize);

    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let k = self.0.len().min(self.1).min(buf.len());
            buf[..k].copy_from_slice(&self.0[..k]);
            self.0 = &self.0[k..];
            Ok(k)
        }
    }

    fn own(text: &str) -> Vec<u64> {
        (1..=text.len().max(1))
            .map(|size| drain_own(Pieces(text.as_bytes(), size)).expect("reads"))
            .collect()
    }

    #[test]
    fn the_control_planes_first_lines_are_not_the_runs_bytes() {
        let host = "div: no image pulled: this machine's own system stands in\n";
        let run = "the quick brown fox\ndiv: said by the run\n";
        // However the reads cut it, only the run's bytes count (its own `div: ` line too).
        for n in own(&format!("{host}div: emulated h100\n{run}")) {
            assert_eq!(n, run.len() as u64);
        }
        for n in own(run) {
            assert_eq!(n, run.len() as u64);
        }
        for n in own("di") {
            assert_eq!(n, 2);
        }
        assert_eq!(own(""), [0]);
    }
}
