//! The flags of the `div` benchmarks.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};

pub(crate) struct Args {
    pub(crate) div: Option<PathBuf>,
    pub(crate) runs: usize,
    pub(crate) log_mib: u64,
    pub(crate) stored: u64,
    pub(crate) burst: usize,
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
