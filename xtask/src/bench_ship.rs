//! `cargo xtask bench ship [--repo PATH] [--files N] [--shape mixed|test262] [--mib N]
//! [--runs N] [--div PATH] [--user NAME]`: div-ship's listing against `git ls-files -co --exclude-standard`
//! in the same run; when a `div` binary is there (`--div`, or `target/release/div`), `div run
//! --dry-run` against `git status --porcelain -uall`, and on a fresh local control plane the
//! first ship of the repository against `git ls-files | tar | tar` into the same filesystem,
//! then a run of the unchanged repository and the bytes the state directory takes; hashing a
//! tree cold then unchanged, and what a second upload would send.
//!
//! With `--user NAME` (as root), only the first ship and the unchanged runs are measured, and
//! both sides run as that user: `div` (so its local control plane is an unprivileged server)
//! and `git ls-files | tar | tar`. git and div refuse a repository another user owns, so a
//! generated one is given to that user, and a `--repo` must be that user's already.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::timing::{median, ms, ratio};

struct Args {
    repo: Option<PathBuf>,
    files: Option<usize>,
    shape: Shape,
    mib: usize,
    runs: usize,
    div: Option<PathBuf>,
    user: Option<String>,
}

/// Who the commands of a `--user` bench run as: `setpriv` in front of each.
#[derive(Clone)]
struct As {
    uid: u32,
    gid: u32,
}

impl As {
    fn of(name: &str) -> Result<As> {
        let id = |flag: &str| -> Result<u32> {
            let out = Command::new("id")
                .args([flag, name])
                .output()
                .context("running id")?;
            ensure!(
                out.status.success(),
                "no user `{name}` here (`useradd -m {name}`)"
            );
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .with_context(|| format!("`id {flag} {name}`"))
        };
        Ok(As {
            uid: id("-u")?,
            gid: id("-g")?,
        })
    }

    /// `program` run as this user.
    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "--"])
            .arg(program);
        command
    }

    /// Gives `path`, and everything below it, to this user.
    fn own(&self, path: &Path) -> Result<()> {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(path)
            .status()
            .context("running chown")?;
        ensure!(status.success(), "chown -R {} failed", path.display());
        Ok(())
    }
}

/// The generated repository.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// 50 000 small files in 1 000 folders, half tracked, a tenth ignored.
    Mixed,
    /// test262's: 57 059 files of about 1.6 KB (90 MB), every one committed, in about 3 000
    /// folders three to five deep, a few of them with hundreds of files.
    Test262,
}

fn parse(rest: &[String]) -> Result<Args> {
    let mut args = Args {
        repo: None,
        files: None,
        shape: Shape::Mixed,
        mib: 1024,
        runs: 9,
        div: None,
        user: None,
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--repo" => args.repo = Some(PathBuf::from(value()?)),
            "--files" => args.files = Some(value()?.parse().context("--files is a count")?),
            "--shape" => {
                args.shape = match value()?.as_str() {
                    "mixed" => Shape::Mixed,
                    "test262" => Shape::Test262,
                    other => bail!("--shape is `mixed` or `test262`, not `{other}`"),
                }
            }
            // Absolute: div runs in the repository's folder.
            "--div" => {
                let div = PathBuf::from(value()?);
                args.div = Some(
                    div.canonicalize()
                        .with_context(|| format!("`{}`", div.display()))?,
                )
            }
            "--mib" => args.mib = value()?.parse().context("--mib is a count of MiB")?,
            "--runs" => args.runs = value()?.parse().context("--runs is a count")?,
            "--user" => args.user = Some(value()?.clone()),
            other => bail!(
                "unknown flag `{other}`; expected --repo, --files, --shape, --mib, --runs, --div or --user"
            ),
        }
    }
    ensure!(args.runs > 0, "--runs must be at least 1");
    Ok(args)
}

pub(crate) fn run(rest: &[String]) -> Result<()> {
    let args = parse(rest)?;
    let tmp = tempfile::tempdir().context("creating a temporary folder")?;
    let repo = match &args.repo {
        Some(repo) => repo
            .canonicalize()
            .with_context(|| format!("`{}`", repo.display()))?,
        None => {
            let repo = tmp.path().join("repo");
            let started = Instant::now();
            let files = match args.shape {
                Shape::Mixed => {
                    let files = args.files.unwrap_or(50_000);
                    generate_repo(&repo, files)?;
                    files
                }
                Shape::Test262 => {
                    let files = args.files.unwrap_or(57_059);
                    generate_test262(&repo, files)?;
                    files
                }
            };
            eprintln!("generated {files} files in {:.1?}", started.elapsed());
            repo
        }
    };
    let div = args.div.clone().or_else(|| {
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/div");
        built.is_file().then_some(built)
    });
    if let Some(name) = &args.user {
        let who = As::of(name)?;
        if args.repo.is_some() {
            use std::os::unix::fs::MetadataExt;
            ensure!(
                fs::metadata(&repo)?.uid() == who.uid,
                "`{}` is not `{name}`'s: git and div refuse another user's repository (give it to `{name}`, or leave out --repo to bench a generated one)",
                repo.display()
            );
        } else {
            // The generated repository, and the folders above it, the user's to read.
            who.own(tmp.path())?;
        }
        let div = div.context(
            "--user needs a `div` binary (`cargo build --release -p div-cli`, or --div PATH)",
        )?;
        println!(
            "as `{name}` (uid {}): the first ship and the unchanged runs only",
            who.uid
        );
        return ship(&repo, &div, args.runs, Some(&who));
    }
    listing(&repo, args.runs)?;
    match div {
        Some(div) => {
            dry_run(&repo, &div, args.runs)?;
            ship(&repo, &div, args.runs, None)?;
        }
        None => println!(
            "dry run: no `div` binary (`cargo build --release -p div-cli`, or --div PATH): skipped"
        ),
    }
    hashing(&tmp.path().join("hash"), args.mib, args.runs.min(5))?;
    Ok(())
}

/// `files` small files in nested folders, a `.gitignore` with a negation, half of them added
/// to the index, a tenth ignored.
fn generate_repo(repo: &Path, files: usize) -> Result<()> {
    fs::create_dir_all(repo)?;
    git(repo, &["init", "-q"])?;
    fs::write(repo.join(".gitignore"), "*.log\nbuild/\n!keep.log\n")?;
    for i in 0..files {
        let dir = repo.join(format!("pkg{:02}/mod{:02}", i % 40, (i / 40) % 25));
        fs::create_dir_all(&dir)?;
        let name = match i % 10 {
            0 => format!("run{i}.log"),
            1 => "keep.log".to_owned(),
            _ => format!("file{i}.py"),
        };
        fs::write(dir.join(name), format!("# {i}\n"))?;
    }
    fs::create_dir_all(repo.join("build"))?;
    fs::write(repo.join("build/out.bin"), "x")?;
    let mut add = Command::new("git");
    add.args([
        "add",
        "--",
        ":(glob)pkg0*/**",
        ":(glob)pkg1*/**",
        ".gitignore",
    ])
    .current_dir(repo);
    ensure!(add.status()?.success(), "git add failed");
    Ok(())
}

/// A tree of test262's shape (see [`Shape::Test262`]), committed.
pub(crate) fn generate_test262(repo: &Path, files: usize) -> Result<()> {
    fs::create_dir_all(repo)?;
    git(repo, &["init", "-q"])?;
    fs::write(repo.join(".gitignore"), "node_modules/\n*.pyc\n")?;
    // test262's top: a few small folders beside `test/`, which holds nearly everything.
    let mut written = 0;
    for (dir, n) in [("harness", 120), ("src", 300), ("tools", 180), ("docs", 20)] {
        for i in 0..n {
            let path = repo.join(format!("{dir}/part{}/f{i}.js", i % 7));
            fs::create_dir_all(path.parent().expect("a joined path has a parent"))?;
            fs::write(path, js_body(written))?;
            written += 1;
        }
    }
    let areas = [
        ("built-ins", 60),
        ("language", 34),
        ("intl402", 4),
        ("staging", 2),
    ];
    let rest = files.saturating_sub(written);
    let mut counts: Vec<usize> = areas.iter().map(|(_, p)| rest * p / 100).collect();
    counts[0] += rest - counts.iter().sum::<usize>();
    let mut i = 0;
    for ((area, _), n) in areas.into_iter().zip(counts) {
        for j in 0..n {
            // 60 groups of up to 18 folders; one folder in 40 is a big one.
            let group = j % 60;
            let folder = (j / 60) % 18;
            let deep = if folder % 3 == 0 { "/prototype" } else { "" };
            let path = repo.join(format!("test/{area}/G{group}{deep}/m{folder}/t{i}.js"));
            fs::create_dir_all(path.parent().expect("a joined path has a parent"))?;
            fs::write(path, js_body(i))?;
            i += 1;
        }
    }
    git(repo, &["add", "-A"])?;
    git(
        repo,
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-qm",
            "test262",
        ],
    )?;
    Ok(())
}

/// About 1.6 KB of a test file.
fn js_body(i: usize) -> String {
    let mut body = format!("// Copyright (C) {i}\n/*---\ndescription: case {i}\n---*/\n");
    while body.len() < 1580 {
        body.push_str("assert.sameValue(typeof Object.prototype, \"object\");\n");
    }
    body
}

/// `div run --dry-run` (the process, as a user runs it, hash cache warm) against
/// `git status --porcelain -uall` in the same repository, interleaved run by run so that the
/// machine's load weighs on both alike.
fn dry_run(repo: &Path, div: &Path, runs: usize) -> Result<()> {
    let home = tempfile::tempdir().context("creating a temporary folder")?;
    let run_div = || {
        div_in(
            repo,
            div,
            home.path(),
            &["run", "--dry-run", "--gpu", "cpu", "--", "true"],
            None,
        )
    };
    let run_git = || {
        git(
            repo,
            &["status", "--porcelain", "-z", "--untracked-files=all"],
        )
    };
    // Warm both: the hash cache written, the local control plane started (the dry run reads
    // its catalogue), git's index refreshed.
    let warm = run_div();
    let timed = warm.and_then(|_| {
        run_git()?;
        let (mut div_times, mut git_times) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let started = Instant::now();
            run_git()?;
            git_times.push(started.elapsed());
            let started = Instant::now();
            run_div()?;
            div_times.push(started.elapsed());
        }
        Ok((div_times, git_times))
    });
    let stopped = Command::new(div)
        .args(["server", "stop"])
        .env("DIVERGENT_HOME", home.path().join("div"))
        .output();
    let (mut div_times, mut git_times) = timed?;
    ensure!(
        stopped.is_ok_and(|o| o.status.success()),
        "`div server stop` failed: the local control plane the dry runs started may still run"
    );
    let git_time = crate::timing::percentile(&mut git_times, 50);
    let div_time = crate::timing::percentile(&mut div_times, 50);
    println!(
        "dry run ({}, median of {runs}, interleaved; load average {})",
        div.display(),
        load_average()
    );
    println!(
        "  git status --porcelain -uall         {:>8.1} ms",
        ms(git_time)
    );
    println!(
        "  div run --dry-run, hash cache warm   {:>8.1} ms  ({:.2}× git status; goal ≤ 1.0×: {})",
        ms(div_time),
        ratio(div_time, git_time),
        crate::timing::verdict(div_time <= git_time)
    );
    Ok(())
}

/// On a fresh local control plane: the first `div run --gpu cpu -- true` of the repository
/// (hash cache cold, every file shipped) against `git ls-files -z -co --exclude-standard | tar
/// --null -T - -c | tar -x` into a folder beside the state directory, in `runs` rounds (at
/// least 3), the two taking turns, each into a fresh folder, the disk synced before each:
/// one try of each is at the mercy of what the disk was still writing back. Then runs of the
/// unchanged repository on the last round's control plane, and what its state directory takes.
/// Nothing is deleted until the end (on ext4, files deleted moments before make creating new
/// ones slower, the deleting tool's and the next one alike).
fn ship(repo: &Path, div: &Path, runs: usize, who: Option<&As>) -> Result<()> {
    let tmp = tempfile::tempdir_in(repo.parent().unwrap_or(repo))
        .context("creating a temporary folder beside the repository")?;
    if let Some(who) = who {
        who.own(tmp.path())?;
    }
    // Every `div` of the bench runs as `who` when one is given.
    let div_as = |repo: &Path, div: &Path, scratch: &Path, args: &[&str]| {
        div_in(repo, div, scratch, args, who)
    };
    let sync = || Command::new("sync").status().map(|_| ());
    let rounds = runs.max(3);
    let scratch = |round: usize| tmp.path().join(format!("round-{round}"));
    let result = (|| -> Result<()> {
        let (mut tar_times, mut div_times) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let scratch = scratch(round);
            // A cache folder of its own (`XDG_CACHE_HOME`): the first ship hashes every file.
            div_as(repo, div, &scratch, &["server", "start"])?;
            let copy = scratch.join("tar-copy");
            fs::create_dir_all(&copy)?;
            if let Some(who) = who {
                who.own(&copy)?;
            }
            sync()?;
            let started = Instant::now();
            let sh = Path::new("/bin/sh");
            let mut tar = who.map_or_else(|| Command::new(sh), |who| who.command(sh));
            if who.is_some() {
                tar.env("HOME", &scratch);
            }
            let status = tar
                .args([
                    "-c",
                    "git ls-files -z -co --exclude-standard | tar --null -T - -c | tar -x -C \"$1\"",
                    "sh",
                ])
                .arg(&copy)
                .current_dir(repo)
                .status()
                .context("running git ls-files | tar | tar")?;
            ensure!(status.success(), "git ls-files | tar | tar failed");
            tar_times.push(started.elapsed());
            sync()?;
            let started = Instant::now();
            div_as(repo, div, &scratch, &["run", "--gpu", "cpu", "--", "true"])?;
            div_times.push(started.elapsed());
            if round + 1 < rounds {
                div_as(repo, div, &scratch, &["server", "stop"])?;
            }
        }
        let last = scratch(rounds - 1);
        let (unchanged, ()) = median(runs.min(5), || {
            div_as(repo, div, &last, &["run", "--gpu", "cpu", "--", "true"]).map(|_| ())
        })?;
        let on_disk = crate::bench_local::du(&[&last.join("div")])?;
        let each: Vec<String> = div_times
            .iter()
            .zip(&tar_times)
            .map(|(d, t)| format!("{:.2}", ratio(*d, *t)))
            .collect();
        let tar_time = crate::timing::percentile(&mut tar_times, 50);
        let first = crate::timing::percentile(&mut div_times, 50);
        println!(
            "ship ({}, fresh local control plane, median of {rounds} rounds taking turns; load average {})",
            repo.display(),
            load_average()
        );
        println!(
            "  git ls-files | tar | tar             {:>8.1} ms",
            ms(tar_time)
        );
        println!(
            "  first div run --gpu cpu -- true      {:>8.1} ms  ({:.2}× tar, each round {}; goal ≤ 1.0×: {})",
            ms(first),
            ratio(first, tar_time),
            each.join(", "),
            crate::timing::verdict(first <= tar_time)
        );
        println!(
            "  unchanged, median of {}              {:>8.1} ms  (goal ≤ 500 ms: {})",
            runs.min(5),
            ms(unchanged),
            crate::timing::verdict(unchanged.as_millis() <= 500)
        );
        println!(
            "  state directory on disk              {:>8.1} MiB",
            on_disk as f64 / f64::from(1u32 << 20)
        );
        Ok(())
    })();
    // Each round's control plane, stopped (a failed round leaves its own running).
    for round in 0..rounds {
        if scratch(round).join("div").exists() {
            let _ = div_as(repo, div, &scratch(round), &["server", "stop"]);
        }
    }
    result
}

/// `div args…` in `repo`, its state directory, cache and config under `scratch`; its stderr,
/// or why it failed.
fn div_in(
    repo: &Path,
    div: &Path,
    scratch: &Path,
    args: &[&str],
    who: Option<&As>,
) -> Result<Vec<u8>> {
    let mut command = who.map_or_else(|| Command::new(div), |who| who.command(div));
    if who.is_some() {
        command.env("HOME", scratch);
    }
    let out = command
        .args(args)
        .current_dir(repo)
        .env("DIVERGENT_HOME", scratch.join("div"))
        .env("XDG_CACHE_HOME", scratch.join("cache"))
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .env_remove("DIVERGENT_API_URL")
        .env_remove("DIVERGENT_TIMINGS")
        .output()
        .with_context(|| format!("running `{}`", div.display()))?;
    ensure!(
        out.status.success(),
        "div {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stderr)
}

fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running git")?;
    ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

fn listing(repo: &Path, runs: usize) -> Result<()> {
    let (git_time, git_out) = median(runs, || {
        git(repo, &["ls-files", "-z", "-co", "--exclude-standard"])
    })?;
    let (div_time, (_, div_paths)) = median(runs, || Ok(div_ship::list_paths(repo)?))?;
    let git_paths: BTreeSet<&[u8]> = git_out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty() && !p.ends_with(b"/"))
        .collect();
    let div_set: BTreeSet<&[u8]> = div_paths.iter().map(|p| p.as_bytes()).collect();
    ensure!(
        git_paths == div_set,
        "div-ship lists {} paths, git {}: the sets differ",
        div_set.len(),
        git_paths.len()
    );
    // What git does that is closest to `collect`: stat the tracked files, walk the rest.
    let (status_time, _) = median(runs, || {
        git(
            repo,
            &["status", "--porcelain", "-z", "--untracked-files=all"],
        )
    })?;
    let (collect_time, shipment) = median(runs, || {
        Ok(div_ship::collect(
            repo,
            &div_ship::ShipOptions {
                cache: Some(repo.join(".git/div-bench.cache")),
                ..Default::default()
            },
        )?)
    })?;
    println!(
        "listing {} ({} paths, median of {runs}, warm; load average {})",
        repo.display(),
        div_set.len(),
        load_average()
    );
    if cfg!(debug_assertions) {
        println!(
            "  (div-ship runs here inside xtask, built without optimisation: for its real speed, \
             `cargo run --release -p xtask -- bench ship …`; the dry run below is the `div` binary)"
        );
    }
    println!(
        "  git ls-files -co --exclude-standard  {:>8.1} ms",
        ms(git_time)
    );
    println!(
        "  div_ship::list_paths                 {:>8.1} ms  ({:.2}× git)",
        ms(div_time),
        ratio(div_time, git_time)
    );
    println!(
        "  git status --untracked-files=all     {:>8.1} ms  ({:.2}× git ls-files)",
        ms(status_time),
        ratio(status_time, git_time)
    );
    println!(
        "  div_ship::collect, hash cache warm   {:>8.1} ms  ({:.2}× git ls-files, {:.2}× git status; {} files hashed)",
        ms(collect_time),
        ratio(collect_time, git_time),
        ratio(collect_time, status_time),
        shipment.stats.hashed_files
    );
    Ok(())
}

/// The 1-minute load average, or `?` where `/proc/loadavg` is not there: timings on a shared
/// machine mean little without it.
pub(crate) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

fn hashing(dir: &Path, mib: usize, runs: usize) -> Result<()> {
    // 1 MiB .. 64 MiB files of varied content, `mib` MiB in all.
    let sizes = [64usize, 16, 4, 1];
    let mut left = mib;
    let mut i = 0usize;
    let mut block = vec![0u8; 1 << 20];
    while left > 0 {
        let size = sizes[i % sizes.len()].min(left);
        let path = dir.join(format!("d{}/f{i}.bin", i % 8));
        fs::create_dir_all(path.parent().expect("a joined path has a parent"))?;
        let mut content = Vec::with_capacity(size << 20);
        for chunk in 0..size {
            let seed = (i * 1000 + chunk) as u64;
            for (j, b) in block.iter_mut().enumerate() {
                *b = (seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(j as u64)
                    >> 24) as u8;
            }
            content.extend_from_slice(&block);
        }
        fs::write(&path, &content)?;
        left -= size;
        i += 1;
    }
    let cache = dir.with_extension("cache");
    let options = div_ship::ShipOptions {
        cache: Some(cache.clone()),
        ..Default::default()
    };
    let mut cold_times = Vec::new();
    for _ in 0..runs {
        let _ = fs::remove_file(&cache);
        let started = Instant::now();
        let shipment = div_ship::collect(dir, &options)?;
        cold_times.push(started.elapsed());
        ensure!(
            shipment.stats.hashed_bytes as usize == mib << 20,
            "the cold run hashed everything"
        );
    }
    cold_times.sort();
    let cold = cold_times[cold_times.len() / 2];
    let (warm, shipment) = median(runs, || Ok(div_ship::collect(dir, &options)?))?;
    ensure!(
        shipment.stats.hashed_files == 0,
        "an unchanged tree hashes nothing"
    );

    // The volume starts empty, receives the first upload, then is asked again.
    let all: Vec<String> = shipment
        .manifest
        .entries
        .iter()
        .filter_map(|e| e.hash.clone())
        .collect();
    let first = div_ship::UploadPlan::new(&shipment, &all, &BTreeMap::new());
    let volume: BTreeSet<String> = first.blobs.iter().map(|b| b.hash.clone()).collect();
    let again = div_ship::collect(dir, &options)?;
    let missing: Vec<String> = again
        .manifest
        .entries
        .iter()
        .filter_map(|e| e.hash.clone())
        .filter(|h| !volume.contains(h))
        .collect();
    let second = div_ship::UploadPlan::new(&again, &missing, &BTreeMap::new());

    println!(
        "hashing {} MiB in {} files (median of {runs})",
        mib,
        shipment.files()
    );
    println!(
        "  cold (no hash cache)                 {:>8.1} ms  ({:.0} MiB/s)",
        ms(cold),
        mib as f64 / cold.as_secs_f64()
    );
    println!(
        "  unchanged (hash cache)               {:>8.1} ms  ({:.1}% of cold)",
        ms(warm),
        100.0 * ratio(warm, cold)
    );
    println!("upload");
    println!(
        "  first upload sends                   {:>8} bytes",
        first.total_bytes
    );
    println!(
        "  second upload of the same tree sends {:>8} bytes",
        second.total_bytes
    );
    Ok(())
}
