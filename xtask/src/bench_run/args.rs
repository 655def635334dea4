//! The flags of the `div` benchmarks.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};

pub(crate) struct Args {
    pub(crate) div: Option<PathBuf>,
    /// `--runs`, as typed: each benchmark has its own default ([`Args::runs`]).
    runs: Option<usize>,
    pub(crate) log_mib: u64,
    pub(crate) stored: u64,
    pub(crate) burst: usize,
    /// The files of `startup`'s big repository (the `ship` bench's tree of test262's shape).
    pub(crate) tree_files: usize,
}

impl Args {
    /// `--runs`, or `default` when it was not typed.
    pub(crate) fn runs(&self, default: usize) -> usize {
        self.runs.unwrap_or(default)
    }
}

pub(crate) fn parse(rest: &[String]) -> Result<Args> {
    let mut args = Args {
        div: None,
        runs: None,
        log_mib: 256,
        stored: 100_000,
        burst: 200,
        tree_files: 40_000,
    };
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--div" => args.div = Some(PathBuf::from(value()?)),
            "--runs" => args.runs = Some(value()?.parse().context("--runs is a count")?),
            "--log-mib" => args.log_mib = value()?.parse().context("--log-mib is a count")?,
            "--stored" => args.stored = value()?.parse().context("--stored is a count")?,
            "--burst" => args.burst = value()?.parse().context("--burst is a count")?,
            "--tree-files" => {
                args.tree_files = value()?.parse().context("--tree-files is a count")?
            }
            other => bail!(
                "unknown flag `{other}`; expected --div, --runs, --log-mib, --stored, --burst or --tree-files"
            ),
        }
    }
    ensure!(args.runs != Some(0), "--runs must be at least 1");
    ensure!(args.tree_files > 0, "--tree-files must be at least 1");
    Ok(args)
}
