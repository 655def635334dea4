//! Project tasks: `cargo xtask ci`, `cargo xtask bench [NAME]`, `cargo xtask fuzz [SECONDS]`,
//! `cargo xtask schemathesis [SECONDS]`, `cargo xtask deny`, `cargo xtask advisory-db [CLONE]`,
//! `cargo xtask arch` (the shape rules of ARCHITECTURE.md, `arch.rs`).
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::disallowed_methods)]

use std::process::Command;

mod arch;
mod bench_cache;
mod bench_dashboard;
mod bench_image;
mod bench_local;
mod bench_run;
mod bench_ship;
mod bench_slurm;
mod deny;
mod schemathesis;
mod timing;

use anyhow::{Context, Result, bail, ensure};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(task) = args.first() else {
        bail!(
            "usage: cargo xtask <ci|arch|bench [NAME]|fuzz [SECONDS]|schemathesis [SECONDS]|deny|advisory-db [CLONE]>"
        );
    };
    let rest = &args[1..];
    match task.as_str() {
        "ci" => ci(),
        "bench" => bench(rest),
        "fuzz" => fuzz(rest),
        "schemathesis" => schemathesis::run(rest),
        "deny" => deny::deny(),
        "arch" => match rest {
            [flag, krate] if flag == "--map" => arch::print_map(&workspace_root().join(krate)),
            [] => arch::run(&workspace_root()),
            _ => bail!("usage: cargo xtask arch [--map CRATE_DIR]"),
        },
        "advisory-db" => deny::refresh(rest),
        other => bail!(
            "unknown task `{other}`; expected ci, arch, bench, fuzz, schemathesis, deny or advisory-db"
        ),
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// fmt, clippy, tests, and every cargo deny check (`deny::deny`).
fn ci() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(cargo().args(["test", "--workspace", "--locked"]))?;
    // Every cargo-deny check, advisories included, against the vendored advisory database;
    // cargo-deny is installed when missing.
    deny::deny()?;
    Ok(())
}

fn bench(rest: &[String]) -> Result<()> {
    let (name, flags) = match rest.first() {
        Some(first) if !first.starts_with("--") => (first.as_str(), &rest[1..]),
        _ => ("all", rest),
    };
    match name {
        "ship" => bench_ship::run(flags),
        "dashboard" => bench_dashboard::run(flags),
        "slurm" => bench_slurm::run(flags),
        "cache" => bench_cache::run(flags),
        "image" => bench_image::run(flags),
        "all" => {
            bench_ship::run(&[])?;
            bench_run::run("all", flags)
        }
        other => bench_run::run(other, flags),
    }
}

/// `cargo xtask fuzz [SECONDS] [TARGET…] [--sanitizer address|none]`: each fuzz target (or
/// those named) for `seconds`, new inputs kept in a scratch corpus (the committed corpus is
/// read, never written); prints each target's executions and whether it crashed. The
/// sanitizer is cargo-fuzz's (`address` unless told): `none` runs several times faster,
/// which the allocation-heavy targets need to reach their executions in reasonable time.
fn fuzz(rest: &[String]) -> Result<()> {
    let mut words: Vec<&str> = Vec::new();
    let mut sanitizer = "address";
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--sanitizer" => {
                sanitizer = match it.next().map(String::as_str) {
                    Some(s @ ("address" | "none")) => s,
                    other => bail!(
                        "`--sanitizer` is `address` or `none`, not `{}`",
                        other.unwrap_or("")
                    ),
                }
            }
            flag if flag.starts_with("--") => {
                bail!("unknown flag `{flag}`; expected --sanitizer, SECONDS or a target")
            }
            word => words.push(word),
        }
    }
    let seconds: u64 = match words.first() {
        Some(s) => s
            .parse()
            .context("the fuzz time is whole seconds per target")?,
        None => 30,
    };
    let only: Vec<&str> = words.iter().skip(1).copied().collect();
    let list = Command::new("cargo")
        .args(["+nightly", "fuzz", "list"])
        .current_dir("fuzz")
        .output()
        .context("running `cargo fuzz list` (cargo install cargo-fuzz; needs nightly)")?;
    if !list.status.success() {
        bail!(
            "cargo fuzz list failed: {}",
            String::from_utf8_lossy(&list.stderr)
        );
    }
    let scratch = tempfile::tempdir().context("creating a scratch corpus")?;
    let mut summary = Vec::new();
    let listed = String::from_utf8_lossy(&list.stdout).into_owned();
    let targets: Vec<&str> = listed.lines().collect();
    for name in &only {
        ensure!(
            targets.contains(name),
            "no fuzz target `{name}`; the targets are {}",
            targets.join(", ")
        );
    }
    for target in targets {
        if !only.is_empty() && !only.contains(&target) {
            continue;
        }
        let corpus = scratch.path().join(target);
        std::fs::create_dir_all(&corpus)?;
        let mut cmd = Command::new("cargo");
        cmd.current_dir("fuzz")
            .args(["+nightly", "fuzz", "run", "--sanitizer", sanitizer, target])
            .arg(&corpus)
            .arg(format!("corpus/{target}"))
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                "-print_final_stats=1",
            ]);
        eprintln!("$ {cmd:?}");
        let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
        let text = String::from_utf8_lossy(&out.stderr);
        let runs = text
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map_or("?".to_owned(), |n| n.trim().to_owned());
        let found = if out.status.success() {
            "no crash".to_owned()
        } else {
            eprintln!("{text}");
            "CRASHED (see fuzz/artifacts)".to_owned()
        };
        summary.push(format!(
            "{target:<12} {runs:>12} executions in {seconds} s  (sanitizer: {sanitizer})  {found}"
        ));
    }
    println!("{}", summary.join("\n"));
    if summary.iter().any(|l| l.contains("CRASHED")) {
        bail!("a fuzz target crashed");
    }
    Ok(())
}

/// The workspace's root: the folder above xtask's own.
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}
