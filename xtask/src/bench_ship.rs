//! `cargo xtask bench ship [--repo PATH] [--files N] [--mib N] [--runs N]`: div-ship's listing
//! against `git ls-files -co --exclude-standard` in the same run, hashing a tree cold then
//! unchanged, and what a second upload would send.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::timing::{median, ms, ratio};

struct Args {
    repo: Option<PathBuf>,
    files: usize,
    mib: usize,
    runs: usize,
}

fn parse(rest: &[String]) -> Result<Args> {
    let mut args = Args {
        repo: None,
        files: 50_000,
        mib: 1024,
        runs: 9,
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--repo" => args.repo = Some(PathBuf::from(value()?)),
            "--files" => args.files = value()?.parse().context("--files is a count")?,
            "--mib" => args.mib = value()?.parse().context("--mib is a count of MiB")?,
            "--runs" => args.runs = value()?.parse().context("--runs is a count")?,
            other => bail!("unknown flag `{other}`; expected --repo, --files, --mib or --runs"),
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
            generate_repo(&repo, args.files)?;
            eprintln!(
                "generated {} files in {:.1?}",
                args.files,
                started.elapsed()
            );
            repo
        }
    };
    listing(&repo, args.runs)?;
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
fn load_average() -> String {
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
