//! `startup` (and its old name `overhead`): how near `div` starts to what it stands on, each
//! side taken in turns (A, B, A, B…, one warm-up of each first) and compared by medians:
//!
//! - `div --version` against `git --version` (goal ≤ 1.0×);
//! - a warm `div run --gpu cpu -- true` against a bare `bwrap … sh -lc true` with the binds the
//!   local control plane gives a run (goal ≤ 2.0×);
//! - `div run --gpu cpu -- true` in an unchanged generated repository (`--tree-files`, 40,000
//!   by default, the `ship` bench's tree of test262's shape, committed) against the same in a
//!   one-file repository (goal ≤ 3.0×);
//!
//! then where the warm run's time goes, on one timeline from the moment the bench started
//! `div`: the client's steps (`DIVERGENT_TIMINGS`) and the marks the server and the run's
//! supervisor write to `RUN_DIR/phases`, each the median over the same runs.
//!
//! Pairs: `--runs N` (default 21).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::args::Args;
use super::overhead::{Timed, bare_bwrap, timed};
use super::timeline::{self, Sample, add_marks, client_sample, client_steps, median_f64};
use crate::bench_local::{Local, quiet};
use crate::bench_ship::{generate_test262, load_average};
use crate::timing::{ms, percentile, ratio, verdict};

/// A goal: what was measured against what, and the most the ratio may be.
struct Goal {
    what: String,
    against: String,
    ratio: f64,
    most: f64,
}

pub(crate) fn startup(div: &Path, args: &Args) -> Result<()> {
    let pairs = args.runs(21);
    println!(
        "startup ({}; {pairs} pairs each, taken in turns; load average {})",
        div.display(),
        load_average()
    );
    let mut goals = vec![versions(div, pairs)?];
    let local = Local::start(div, "")?;
    let (goal, samples, bare) = run_against_bwrap(&local, pairs)?;
    goals.push(goal);
    goals.push(big_against_small(&local, args.tree_files, pairs)?);
    println!("goals (load average now {}):", load_average());
    for g in &goals {
        println!(
            "  {}: {:.2}× {} (goal ≤ {:.1}×: {})",
            g.what,
            g.ratio,
            g.against,
            g.most,
            verdict(g.ratio <= g.most)
        );
    }
    phases(&local, samples, bare)
}

/// `n` pairs of `a` then `b`, after one warm-up of each; each side's times, as each side
/// measured itself.
fn interleaved(
    n: usize,
    mut a: impl FnMut() -> Result<Duration>,
    mut b: impl FnMut() -> Result<Duration>,
) -> Result<(Vec<Duration>, Vec<Duration>)> {
    a()?;
    b()?;
    let (mut ta, mut tb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        ta.push(a()?);
        tb.push(b()?);
    }
    Ok((ta, tb))
}

/// How long `cmd` took, run quietly.
fn clocked(cmd: &mut Command) -> Result<Duration> {
    let started = Instant::now();
    quiet(cmd)?;
    Ok(started.elapsed())
}

/// Prints the median of each side, the second against the first; the goal it is held to.
fn compare((a, ma): (&str, Duration), (b, mb): (&str, Duration), most: f64) -> Goal {
    let r = ratio(mb, ma);
    println!("  {a:<44} {:8.2} ms", ms(ma));
    println!(
        "  {b:<44} {:8.2} ms  {r:5.2}×  (goal ≤ {most:.1}×: {})",
        ms(mb),
        verdict(r <= most)
    );
    Goal {
        what: b.to_owned(),
        against: a.to_owned(),
        ratio: r,
        most,
    }
}

fn versions(div: &Path, pairs: usize) -> Result<Goal> {
    let (git, version) = interleaved(
        pairs,
        || clocked(Command::new("git").arg("--version")),
        || clocked(Command::new(div).arg("--version")),
    )?;
    println!("start-up (median of {pairs}):");
    Ok(compare(
        ("git --version", median(git)),
        ("div --version", median(version)),
        1.0,
    ))
}

/// `div run --gpu cpu -- true` on `local`'s warm server, in `dir` (its one-file project when
/// `None`), with `DIVERGENT_TIMINGS`; its output timed line by line.
fn div_run(local: &Local, dir: Option<&Path>) -> Result<Timed> {
    let mut cmd = local.cmd(&["run", "--gpu", "cpu", "--", "true"]);
    cmd.env("DIVERGENT_TIMINGS", "1")
        // The hash cache in the bench's own folder, not the user's.
        .env("XDG_CACHE_HOME", local.home.with_file_name("cache"));
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    timed(cmd)
}

/// The median of `times`.
fn median(mut times: Vec<Duration>) -> Duration {
    percentile(&mut times, 50)
}

/// The warm run against bare bubblewrap; each run's client-side timeline, for [`phases`], and
/// bare bubblewrap's median.
fn run_against_bwrap(local: &Local, pairs: usize) -> Result<(Goal, Vec<Sample>, Duration)> {
    let bare_dir = tempfile::tempdir()?;
    let mut samples = Vec::new();
    let (bare, run) = interleaved(
        pairs,
        || Ok(timed(bare_bwrap(bare_dir.path(), "true")?)?.exit),
        || {
            let t = div_run(local, None)?;
            samples.push(client_sample(&t)?);
            Ok(t.exit)
        },
    )?;
    // The warm-up's, left out.
    samples.remove(0);
    println!("a run, warm server, one-file project (median of {pairs}):");
    let bare = median(bare);
    let goal = compare(
        ("bwrap … sh -lc true (the same binds)", bare),
        ("div run --gpu cpu -- true", median(run)),
        2.0,
    );
    Ok((goal, samples, bare))
}

/// A one-file repository, committed, in `dir`.
fn one_file_repo(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(dir.join("train.py"), "print('hi')\n")?;
    for args in [
        &["init", "-q"][..],
        &["add", "train.py"],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-qm",
            "one file",
        ],
    ] {
        let status = Command::new("git").args(args).current_dir(dir).status()?;
        ensure!(
            status.success(),
            "git {args:?} failed in `{}`",
            dir.display()
        );
    }
    Ok(())
}

/// The unchanged big repository against the one-file one, on the same warm server; the
/// client's steps of each side beside.
fn big_against_small(local: &Local, files: usize, pairs: usize) -> Result<Goal> {
    let tmp = tempfile::tempdir()?;
    let (big, small) = (tmp.path().join("big"), tmp.path().join("small"));
    let started = Instant::now();
    generate_test262(&big, files)?;
    one_file_repo(&small)?;
    eprintln!("generated {files} files in {:.1?}", started.elapsed());
    // Its first ship, not measured: every run after finds it unchanged.
    let first = div_run(local, Some(&big))?;
    let shipped = first
        .lines
        .iter()
        .find(|l| !l.1 && l.2.contains(" → "))
        .map(|l| l.2.clone())
        .context("div run printed no shipped line")?;
    eprintln!("first ship: {shipped}, {:.1?}", first.exit);
    let (mut small_steps, mut big_steps) = (Steps::default(), Steps::default());
    let (one, many) = interleaved(
        pairs,
        || {
            let t = div_run(local, Some(&small))?;
            small_steps.add(&t)?;
            Ok(t.exit)
        },
        || {
            let t = div_run(local, Some(&big))?;
            big_steps.add(&t)?;
            Ok(t.exit)
        },
    )?;
    let files = shipped.split(" files").next().unwrap_or("?");
    println!("an unchanged repository against a one-file one (median of {pairs}):");
    let goal = compare(
        ("div run -- true, a one-file repository", median(one)),
        (
            &format!("div run -- true, {files} files unchanged"),
            median(many),
        ),
        3.0,
    );
    println!("  their client steps (ms, median):  one file | {files} files");
    for (name, mut one) in small_steps.0 {
        let mut many = big_steps
            .0
            .iter()
            .find(|s| s.0 == name)
            .map(|s| s.1.clone())
            .unwrap_or_default();
        println!(
            "    {name:<28} {:8.2} | {:8.2}",
            median_f64(&mut one),
            median_f64(&mut many)
        );
    }
    Ok(goal)
}

/// Each client step's times, over many runs, in the order the steps came.
#[derive(Default)]
struct Steps(Vec<(String, Vec<f64>)>);

impl Steps {
    fn add(&mut self, t: &Timed) -> Result<()> {
        for (name, value) in client_steps(t)?.steps {
            match self.0.iter_mut().find(|s| s.0 == name) {
                Some(s) => s.1.push(value),
                None => self.0.push((name, vec![value])),
            }
        }
        Ok(())
    }
}

/// The warm runs' phases: each sample's run found by name (`div runs --json`) and its
/// `RUN_DIR/phases` marks added, then the medians printed on one timeline.
fn phases(local: &Local, mut samples: Vec<Sample>, bare: Duration) -> Result<()> {
    let listed = local.ok(&["runs", "--all", "--limit", "1000", "--json"])?;
    let value: serde_json::Value = serde_json::from_slice(&listed).context("div runs --json")?;
    let runs = value
        .get("runs")
        .unwrap_or(&value)
        .as_array()
        .context("div runs --json gave no list")?;
    for sample in &mut samples {
        let id = runs
            .iter()
            .find(|r| r["name"].as_str() == Some(&sample.name))
            .and_then(|r| r["id"].as_str())
            .with_context(|| format!("div runs does not list {}", sample.name))?;
        add_marks(sample, &local.home.join("runs").join(id))?;
    }
    println!(
        "phases of the warm `div run --gpu cpu -- true` above (median of {}):",
        samples.len()
    );
    timeline::print(&samples);
    println!(
        "  beside it, bare `bwrap … sh -lc true` in the same run, whole: {:.2} ms",
        ms(bare)
    );
    Ok(())
}
